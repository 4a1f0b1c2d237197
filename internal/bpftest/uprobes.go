package bpftest

import (
	"os"
	"path/filepath"
	"testing"
)

// PerfEventFDs counts this process's perf event descriptors: each uprobe,
// kprobe or classic tracepoint attached through a perf-event link holds one,
// so a count back at its value before a test shows they were all closed.
func PerfEventFDs(tb testing.TB) int {
	tb.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); target == "anon_inode:[perf_event]" {
			n++
		}
	}
	return n
}

// UprobeEvents returns the uprobes defined through tracefs, where the
// kernel has no uprobe PMU and cilium/ebpf falls back to it; a test
// compares it before and after to see that none of its probes stayed.
func UprobeEvents() string {
	b, _ := os.ReadFile("/sys/kernel/tracing/uprobe_events")
	return string(b)
}
