package bpftest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace that a test made and will delete.
type Netns struct {
	Name string
	// Addr is the IPv4 address of the namespace's veth end, from the
	// documentation range 192.0.2.0/24.
	Addr string
}

// VethPair makes two network namespaces joined by a veth pair, with
// addresses 192.0.2.1 and 192.0.2.2 (TEST-NET-1) and lo up in both, so
// that traffic between them never leaves the pair. Both are deleted when
// the test ends, even if it fails.
func VethPair(t testing.TB) (a, b Netns) {
	t.Helper()
	Require(t)
	prefix := fmt.Sprintf("twt%d", os.Getpid()%100000)
	a = Netns{Name: prefix + "a", Addr: "192.0.2.1"}
	b = Netns{Name: prefix + "b", Addr: "192.0.2.2"}
	for _, ns := range []Netns{a, b} {
		run(t, "ip", "netns", "add", ns.Name)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns.Name).Run() })
	}
	run(t, "ip", "link", "add", prefix+"va", "netns", a.Name, "type", "veth", "peer", "name", prefix+"vb", "netns", b.Name)
	for _, side := range []struct {
		ns  Netns
		dev string
	}{{a, prefix + "va"}, {b, prefix + "vb"}} {
		run(t, "ip", "-n", side.ns.Name, "addr", "add", side.ns.Addr+"/24", "dev", side.dev)
		run(t, "ip", "-n", side.ns.Name, "link", "set", side.dev, "up")
		run(t, "ip", "-n", side.ns.Name, "link", "set", "lo", "up")
	}
	return a, b
}

func run(t testing.TB, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// Do runs fn with the calling goroutine's thread inside ns. Sockets that fn
// creates belong to ns for their whole life, after Do returns too.
func (ns Netns) Do(t testing.TB, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		t.Fatalf("entering netns %s: %v", ns.Name, err)
	}
	defer func() {
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// A thread stuck in the wrong namespace must not be reused.
			panic(fmt.Sprintf("leaving netns %s: %v", ns.Name, err))
		}
	}()
	fn()
}
