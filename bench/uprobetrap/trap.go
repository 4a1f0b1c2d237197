// Package uprobetrap measures what one uprobe costs the call it probes on
// this machine, by the kind of instruction it sits on: the kernel runs
// some probed instructions itself (it emulates jumps and calls) and
// single-steps the rest out of line, a second trap. A return uprobe also
// sits on the function's first instruction. make bench reports it beside
// the TLS uprobes, whose libraries' functions begin with one kind or the
// other.
package uprobetrap

import "unsafe"

// Each function returns x+1. stepped begins with a load from its
// arguments, which the kernel single-steps; emulated with a conditional
// jump to the next instruction (JBE, as Go's stack check ends), which it
// emulates. BenchmarkUprobeTrap checks both encodings in the test binary.

func stepped(x int) int
func emulated(x int) int

// addrs returns where stepped and emulated begin in memory (not their
// Go wrappers, which a call from Go goes through first).
func addrs() (stepped, emulated unsafe.Pointer)
