package teststack

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// alive reports whether a process with this pid exists and has not
// exited: an ended grandchild waits as a zombie until pid 1 (or a
// subreaper), which may be slow, reaps it.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	rest := string(b[bytes.LastIndexByte(b, ')')+1:])
	state := strings.TrimSpace(rest)
	return state != "" && state[0] != 'Z' && state[0] != 'X'
}

// TestProcReadyLineAndStop: the ready line is waited for, output lands in
// the log, and Stop ends the whole group (a grandchild included), once.
func TestProcReadyLineAndStop(t *testing.T) {
	dir := t.TempDir()
	p, err := StartProc(ProcOptions{Name: "sh", Lines: true, LogPath: filepath.Join(dir, "sh.log")},
		"sh", "-c", `sleep 60 & echo "child $!"; echo to-stderr >&2; echo ready; exec sleep 60`)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if _, err := p.WaitLine(10*time.Second, func(l string) bool { return l == "ready" }); err != nil {
		t.Fatal(err)
	}
	first, err := p.WaitLine(time.Second, func(l string) bool { return strings.HasPrefix(l, "child ") })
	if err != nil {
		t.Fatal(err)
	}
	grandchild, _ := strconv.Atoi(strings.TrimPrefix(first, "child "))
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := p.Stop(); err != nil { // idempotent
		t.Fatalf("second Stop: %v", err)
	}
	if done, _ := p.Exited(); !done {
		t.Fatal("not exited after Stop")
	}
	// The grandchild got SIGTERM with the group; it is reaped by init.
	for deadline := time.Now().Add(2 * time.Second); alive(grandchild) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(grandchild) {
		t.Errorf("grandchild %d outlived Stop", grandchild)
	}
	if !p.LogContains("to-stderr") || !p.LogContains("ready") {
		t.Errorf("log lacks stdout or stderr:\n%s", p.Tail(10))
	}
}

// TestProcKilledAfterGrace: a child that ignores SIGTERM is killed after
// the grace period and Stop says so.
func TestProcKilledAfterGrace(t *testing.T) {
	p, err := StartProc(ProcOptions{Lines: true, Grace: 200 * time.Millisecond},
		"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p.LogPath())
	if _, err := p.WaitLine(10*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = p.Stop()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop of a child ignoring SIGTERM: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("Stop took %v with a 200ms grace", d)
	}
}

// TestProcWaits: a child that exits without its line fails the wait at
// once, not at the timeout; WaitReady does the same, and Wait returns
// the exit status.
func TestProcWaits(t *testing.T) {
	p := StartProcT(t, ProcOptions{Lines: true}, "sh", "-c", "echo nope; exit 3")
	start := time.Now()
	_, err := p.WaitLine(time.Minute, func(l string) bool { return l == "ready" })
	if !errors.Is(err, errExited) || time.Since(start) > 10*time.Second {
		t.Errorf("WaitLine on an exited child: %v after %v", err, time.Since(start))
	}
	if err := p.Wait(10 * time.Second); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Wait: %v", err)
	}
	if err := p.WaitReady(time.Minute, "port", TCPListening("127.0.0.1:1")); !errors.Is(err, errExited) {
		t.Errorf("WaitReady on an exited child: %v", err)
	}
}

// TestGroupStopsNewestFirst: StopAll stops children newest first and
// refuses new ones afterwards.
func TestGroupStopsNewestFirst(t *testing.T) {
	var g Group
	defer g.StopAll()
	order := filepath.Join(t.TempDir(), "order")
	var procs []*Proc
	for _, name := range []string{"first", "second"} {
		p, err := g.Start(ProcOptions{Name: name, Lines: true}, "sh", "-c",
			`trap 'echo `+name+` >> `+order+`; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(p.LogPath())
		if _, err := p.WaitLine(10*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	g.StopAll()
	b, _ := os.ReadFile(order)
	if string(b) != "second\nfirst\n" {
		t.Errorf("stopped in order %q, want second then first", b)
	}
	if _, err := g.Start(ProcOptions{}, "true"); err == nil {
		t.Error("Start after StopAll succeeded")
	}
	for _, p := range procs {
		if done, _ := p.Exited(); !done {
			t.Errorf("%s still running", p.Name)
		}
	}
}

// TestProcExitEndsItsGroup: a child that exits by itself takes what it
// left in its group with it, before it is reaped, and a Stop after that
// signals nothing.
func TestProcExitEndsItsGroup(t *testing.T) {
	p, err := StartProc(ProcOptions{Lines: true}, "sh", "-c", `sleep 60 & echo "child $!"; exit 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p.LogPath())
	defer p.Stop()
	first, err := p.WaitLine(10*time.Second, func(l string) bool { return strings.HasPrefix(l, "child ") })
	if err != nil {
		t.Fatal(err)
	}
	grandchild, _ := strconv.Atoi(strings.TrimPrefix(first, "child "))
	if err := p.Wait(10 * time.Second); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if !p.reaped {
		t.Error("done before the reap")
	}
	for deadline := time.Now().Add(2 * time.Second); alive(grandchild) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(grandchild) {
		t.Errorf("grandchild %d outlived the child that started it", grandchild)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop after the exit: %v", err)
	}
}

// TestProcSaysHowItEnded: a failed test's log says whether each child was
// still running or how it had ended.
func TestProcSaysHowItEnded(t *testing.T) {
	for _, c := range []struct {
		script, want string
	}{
		{`echo ready; exec sleep 60`, "running at the test's end"},
		{`echo ready; exit 0`, "had exited with status 0 before the test's end"},
		{`echo ready; exit 4`, "had ended before the test's end: exit status 4"},
		{`echo ready; kill -KILL $$`, "had ended before the test's end: signal: killed"},
	} {
		p, err := StartProc(ProcOptions{Lines: true}, "sh", "-c", c.script)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.WaitLine(10*time.Second, nil); err != nil {
			t.Fatal(err)
		}
		if c.want != "running at the test's end" {
			p.Wait(10 * time.Second)
		}
		if got := p.exitBeforeStop(); got != c.want {
			t.Errorf("%q: %q, want %q", c.script, got, c.want)
		}
		if err := p.Stop(); err != nil {
			t.Errorf("%q: Stop: %v", c.script, err)
		}
		os.Remove(p.LogPath())
	}
}
