package bpftest

import (
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// loopbackIndex is the loopback device's index in every network
// namespace: the kernel registers it first (LOOPBACK_IFINDEX).
const loopbackIndex = 1

// HoldInXDPDispatcher keeps the XDP program prog in the kernel's XDP
// dispatcher until tb ends, so that BPF_PROG_TEST_RUN of prog costs only
// the run.
//
// Why: on 5.10 every BPF_PROG_TEST_RUN of an XDP program adds it to the
// dispatcher and takes it out again, and each of the two rewrites the
// dispatcher's code. A run then costs about 0.5 ms in the Debian 11 guest
// (one guest alone; about 8 ms with three), against 14 µs once the
// program is held; the 6.1 and 6.12 guests do not pay it. A program stays
// in the dispatcher while it is attached anywhere.
//
// It is attached in generic mode to the loopback device of a network
// namespace made for it, which lives only in one locked thread. That
// device stays down, so no packet ever reaches the program there and its
// counters see only the test's own runs. The link and the namespace go
// when tb ends, before cleanups registered earlier, such as the one that
// closes prog.
func HoldInXDPDispatcher(tb testing.TB, prog *ebpf.Program) {
	tb.Helper()
	Require(tb)
	attached := make(chan error)
	release := make(chan struct{})
	released := make(chan error)
	go func() {
		// The thread is never unlocked: when this goroutine returns, the
		// runtime ends the thread, and the namespace with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			attached <- err
			return
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: loopbackIndex, Flags: link.XDPGenericMode})
		attached <- err
		if err != nil {
			return
		}
		<-release
		released <- l.Close()
	}()
	if err := <-attached; err != nil {
		tb.Fatalf("holding the XDP program in the dispatcher: %v", err)
	}
	tb.Cleanup(func() {
		close(release)
		if err := <-released; err != nil {
			tb.Errorf("detaching the XDP program that held the dispatcher: %v", err)
		}
	})
}
