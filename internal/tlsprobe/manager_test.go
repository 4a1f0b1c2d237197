package tlsprobe

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// sleeper starts a process with no TLS library in it.
func sleeper(t *testing.T) uint32 {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return uint32(cmd.Process.Pid)
}

// startManager starts a Manager on cfg.Ports (a port nobody serves when
// none), with a process map of its own, recording what it reports.
func startManager(t *testing.T, cfg Config) (*Manager, *ebpf.Map, func() []Target) {
	t.Helper()
	procs, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { procs.Close() })
	var mu sync.Mutex
	var reports []Target
	if cfg.Ports == nil {
		cfg.Ports = []uint16{1}
	}
	cfg.ScanInterval, cfg.Procs = time.Hour, procs
	cfg.Programs = func() (*Programs, error) { return nil, errors.New("no programs in this test") }
	cfg.Report = func(tg Target) { mu.Lock(); reports = append(reports, tg); mu.Unlock() }
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, procs, func() []Target { mu.Lock(); defer mu.Unlock(); return append([]Target(nil), reports...) }
}

// waitTargets waits until the Manager knows n targets.
func waitTargets(t *testing.T, m *Manager, n int) []Target {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tgs := m.Targets(); len(tgs) >= n {
			return tgs
		}
		if time.Now().After(deadline) {
			t.Fatalf("targets %+v, want %d", m.Targets(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Processes the kernel saw do TLS with no library the probes know are
// counted as failures, one per process, reported (and so logged) once
// per file; the kernel is told to time their TLS from record headers.
func TestNoLibraryCountedOncePerProcessReportedOncePerFile(t *testing.T) {
	bpftest.Require(t)
	m, procs, reports := startManager(t, Config{})
	a, b := sleeper(t), sleeper(t)
	m.Discover(a)
	waitTargets(t, m, 1)
	m.Discover(a) // again: the same process is not counted twice
	m.Discover(b)
	tgs := waitTargets(t, m, 2)
	for _, tg := range tgs {
		if tg.Probed || tg.Reason != ReasonNoLibrary || tg.Library != LibUnknown {
			t.Errorf("target %+v: want unprobed, no_library, unknown", tg)
		}
	}
	time.Sleep(50 * time.Millisecond) // the second Discover of a
	if got := m.Failures(); len(got) != 1 || got[Failure{ReasonNoLibrary, LibUnknown}] != 2 {
		t.Errorf("failures %v, want 2 no_library", got)
	}
	if r := reports(); len(r) != 1 {
		t.Errorf("reports %+v, want one: both processes run the same file", r)
	}
	var v bpf.StreamTwTlsProc
	if err := procs.Lookup(a, &v); err != nil || v.State != uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_UNPROBEABLE) {
		t.Errorf("kernel's entry for %d: %+v (%v), want unprobeable", a, v, err)
	}
}

// A process the configuration leaves out is excluded, not a failure, and
// its files are not read.
func TestExcludedProcessIsNoFailure(t *testing.T) {
	bpftest.Require(t)
	// By pid: where sleep is busybox, its executable is not named sleep.
	var excluded atomic.Uint32
	m, procs, _ := startManager(t, Config{Select: func(pid uint32, _ string) bool { return pid != excluded.Load() }})
	a := sleeper(t)
	excluded.Store(a)
	m.Discover(a)
	tgs := waitTargets(t, m, 1)
	if tgs[0].Reason != ReasonExcluded || tgs[0].Probed {
		t.Errorf("target %+v: want excluded", tgs[0])
	}
	if got := m.Failures(); len(got) != 0 {
		t.Errorf("failures %v, want none", got)
	}
	var v bpf.StreamTwTlsProc
	if err := procs.Lookup(a, &v); err != nil || v.State != uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_UNPROBEABLE) {
		t.Errorf("kernel's entry for %d: %+v (%v), want unprobeable", a, v, err)
	}
}

func TestInspectReason(t *testing.T) {
	if _, err := inspect("/nonexistent/libssl.so.3", true); inspectReason(err) != ReasonAccess {
		t.Errorf("%v: want access", err)
	}
	if r := inspectReason(errors.New("has some of the OpenSSL API but no SSL_write")); r != ReasonUnsupported {
		t.Errorf("got %s, want unsupported", r)
	}
}

// Entries the kernel made that the Manager never heard of (a report lost
// to a full queue) are settled at the next scan: a live process is looked
// at as if reported, a gone one's entry is deleted, so that the next
// process given its pid is not taken for it.
func TestScanSettlesEntriesItMissed(t *testing.T) {
	bpftest.Require(t)
	m, procs, _ := startManager(t, Config{})
	live := sleeper(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := uint32(cmd.Process.Pid)
	seen := bpf.StreamTwTlsProc{State: uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_SEEN)}
	for _, pid := range []uint32{live, gone} {
		if err := procs.Put(pid, seen); err != nil {
			t.Fatal(err)
		}
	}
	// The Manager's own scans are an hour apart and nothing calls Discover:
	// this scan is the only one running.
	if err := m.scan(); err != nil {
		t.Fatal(err)
	}
	var v bpf.StreamTwTlsProc
	if err := procs.Lookup(gone, &v); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("entry of exited pid %d: %+v (%v), want none", gone, v, err)
	}
	if err := procs.Lookup(live, &v); err != nil || v.State != uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_UNPROBEABLE) {
		t.Errorf("entry of live pid %d: %+v (%v), want unprobeable (no TLS library)", live, v, err)
	}
	if tgs := m.Targets(); len(tgs) != 1 || tgs[0].PID != live || tgs[0].Reason != ReasonNoLibrary {
		t.Errorf("targets %+v, want pid %d with no library", tgs, live)
	}
}

// A process the Manager knows whose entry the kernel's map lost (the LRU
// map evicts under pressure) is marked again by the next scan, with the
// state it had, not left to its next connection.
func TestScanMarksAgainWhatTheMapLost(t *testing.T) {
	bpftest.Require(t)
	m, procs, _ := startManager(t, Config{})
	pid := sleeper(t)
	if err := procs.Put(pid, bpf.StreamTwTlsProc{State: uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_SEEN)}); err != nil {
		t.Fatal(err)
	}
	// The Manager's own scans are an hour apart and nothing calls Discover:
	// these scans are the only ones running.
	if err := m.scan(); err != nil {
		t.Fatal(err)
	}
	var before bpf.StreamTwTlsProc
	if err := procs.Lookup(pid, &before); err != nil || before.State != uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_UNPROBEABLE) {
		t.Fatalf("entry of pid %d after the first scan: %+v (%v), want unprobeable", pid, before, err)
	}
	if err := procs.Delete(pid); err != nil {
		t.Fatal(err)
	}
	if err := m.scan(); err != nil {
		t.Fatal(err)
	}
	var after bpf.StreamTwTlsProc
	if err := procs.Lookup(pid, &after); err != nil || after != before {
		t.Errorf("entry of pid %d after its loss and a scan: %+v (%v), want %+v again", pid, after, err, before)
	}
}

// A system-wide file that cannot be probed is reported and counted like a
// process's library, and Start goes on. A second path to a file listed
// already is left out: its uprobes would run twice per call.
func TestSystemWideFailureIsReported(t *testing.T) {
	bpftest.Require(t)
	alias := filepath.Join(t.TempDir(), "sh")
	if err := os.Symlink("/bin/sh", alias); err != nil {
		t.Fatal(err)
	}
	m, _, reports := startManager(t, Config{SystemWide: []string{"/nonexistent/libssl.so.3", "/bin/sh", alias}})
	tgs := m.Targets()
	if len(tgs) != 2 {
		t.Fatalf("targets %+v, want the two files", tgs)
	}
	if tgs[0].Probed || tgs[0].Reason != ReasonAccess || tgs[0].PID != 0 {
		t.Errorf("missing file: %+v, want pid 0, access", tgs[0])
	}
	if tgs[1].Probed || tgs[1].Reason != ReasonNoLibrary {
		t.Errorf("/bin/sh: %+v, want no_library", tgs[1])
	}
	if r := reports(); len(r) != 2 {
		t.Errorf("reports %+v, want one per file", r)
	}
	if got := m.Failures(); got[Failure{ReasonAccess, LibUnknown}] != 1 || got[Failure{ReasonNoLibrary, LibUnknown}] != 1 {
		t.Errorf("failures %v", got)
	}
}

// lateTLSServer starts a Python process that listens on a port and, when
// told, imports ssl (mapping the shared libssl), as a server that listens
// before it builds its TLS context does. It returns its pid, its port and
// the function that tells it.
func lateTLSServer(t *testing.T) (pid uint32, port uint16, loadTLS func()) {
	t.Helper()
	teststack.RequireSharedLibSSL(t)
	python := teststack.RequireTool(t, "python3")
	const script = `import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
sys.stdin.readline()
import ssl
print("ssl", flush=True)
sys.stdin.readline()
`
	p := teststack.StartProcT(t, teststack.ProcOptions{Name: "python", Lines: true, Stdin: true}, python, "-S", "-c", script)
	first, err := p.WaitLine(10*time.Second, func(string) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(first, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(p.Pid()), uint16(n), func() {
		t.Helper()
		if err := p.Send("\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := p.WaitLine(10*time.Second, func(l string) bool { return l == "ssl" }); err != nil {
			t.Fatal(err)
		}
	}
}

// A listener in which the scan found no TLS library is looked at again by
// the scans of lateTLSWindow: one that maps libssl after it listens is
// then found by the next scan. Past the window it is not looked at again.
func TestListenerThatLoadsTLSLateIsFound(t *testing.T) {
	bpftest.Require(t)
	for _, late := range []bool{true, false} {
		pid, port, loadTLS := lateTLSServer(t)
		m, _, _ := startManager(t, Config{Ports: []uint16{port}, Kinds: []Kind{KindLibSSL}})
		// Start's scan has looked at it; the Manager's own scans are an
		// hour apart and nothing calls Discover: the scans below are the
		// only others.
		if tgs := m.Targets(); len(tgs) != 0 {
			t.Fatalf("targets %+v before libssl is mapped, want none", tgs)
		}
		if !late {
			s := m.seen[pid] // as if the window had passed
			s.until = time.Now()
			m.seen[pid] = s
		}
		if err := m.scan(); err != nil {
			t.Fatal(err)
		}
		loadTLS()
		if err := m.scan(); err != nil {
			t.Fatal(err)
		}
		tgs := m.Targets()
		if !late {
			if len(tgs) != 0 {
				t.Errorf("past the window: targets %+v, want none", tgs)
			}
			continue
		}
		// The test's Programs fail to load: the library is found, not probed.
		if len(tgs) != 1 || tgs[0].PID != pid || tgs[0].Library != LibOpenSSL || tgs[0].Reason != ReasonLoad {
			t.Errorf("targets %+v, want pid %d's libssl (not loaded: this test has no programs)", tgs, pid)
		}
	}
}
