package procinfo

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLookupThisProcess(t *testing.T) {
	c := NewCache(10)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info := c.Lookup(uint32(os.Getpid()), "fallback")
	if info.Executable != filepath.Base(exe) {
		t.Errorf("executable %q, want %q", info.Executable, filepath.Base(exe))
	}
	if got := c.Lookup(1<<31, "gone"); got.Executable != "gone" {
		t.Errorf("a missing process should keep the fallback name, got %q", got.Executable)
	}
}

// clockTicksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's times: 100
// on the architectures tokenwire runs on (x86-64, arm64).
const clockTicksPerSecond = 100

// uptimeTicks returns the time since boot in clock ticks.
func uptimeTicks(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Skip(err)
	}
	secs, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(secs * clockTicksPerSecond)
}

// realPath returns the file that the command name runs.
func realPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skip(err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		t.Skip(err)
	}
	return p
}

// startChild starts name (a symlink to path, so that the kernel's command
// name is name) with args, and stops it at the end of the test.
func startChild(t *testing.T, path, name string, args ...string) *exec.Cmd {
	t.Helper()
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link, args...)
	if err := cmd.Start(); err != nil {
		t.Skipf("starting %s: %v", path, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestRealProcessExitAndPIDReuse looks up a short-lived child process, lets
// it exit, and checks that a lookup after the exit is not answered with
// another process's details. Where the test may steer the kernel's pid
// allocation (root: ns_last_pid), a process with another executable then
// takes the pid at once (within the same clock tick, as it turns out) and
// must be read afresh.
func TestRealProcessExitAndPIDReuse(t *testing.T) {
	sleep, tail := realPath(t, "sleep"), realPath(t, "tail")
	if filepath.Base(sleep) == filepath.Base(tail) {
		t.Skipf("sleep and tail are the same program (%s)", sleep)
	}
	c := NewCache(16)
	before := uptimeTicks(t)
	// A command name with spaces and parentheses, as the kernel shows it.
	child := startChild(t, sleep, "tw s) (p", "60")
	pid := uint32(child.Process.Pid)
	id, err := c.identify(pid)
	if err != nil {
		t.Fatal(err)
	}
	after := uptimeTicks(t)
	if id.start+2 < before || id.start > after+2 {
		t.Fatalf("start time %d ticks, want between %d and %d (uptime around the start)", id.start, before, after)
	}
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if !bytes.Contains(stat, []byte("(tw s) (p)")) {
		t.Fatalf("the kernel's command name is not the one asked for: %q", stat)
	}
	first := c.Lookup(pid, "fallback")
	// exe is readable for our own child (same user, no privileges gained).
	if first.Executable != filepath.Base(sleep) {
		t.Fatalf("executable %q, want %q", first.Executable, filepath.Base(sleep))
	}
	mine := c.Lookup(uint32(os.Getpid()), "")
	if first.ContainerID != mine.ContainerID {
		t.Errorf("child's container %q, this process's %q", first.ContainerID, mine.ContainerID)
	}
	if again := c.Lookup(pid, "fallback"); again != first {
		t.Errorf("second lookup %+v, want %+v", again, first)
	}
	proc, ok := c.Describe(pid, "fallback")
	if !ok || proc.Info != first || !c.Running(proc) {
		t.Fatalf("Describe: %+v ok=%v running=%v, want the child, running", proc, ok, c.Running(proc))
	}

	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait() // reaped: the pid is free
	if got, want := c.Lookup(pid, "gone"), (Info{"gone", ""}); got != want {
		t.Errorf("after exit: %+v, want %+v", got, want)
	}
	if c.Running(proc) {
		t.Error("the child is reported running after it exited")
	}
	if _, ok := c.Describe(pid, "gone"); ok {
		t.Error("Describe found a process on the freed pid")
	}

	next, err := reusePID(t, pid, tail, "-f", "/dev/null")
	if err != nil {
		t.Logf("pid reuse not tested: %v", err)
		return
	}
	nextID, err := c.identify(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pid %d: first process %+v, second %+v", pid, id, nextID)
	if nextID == id {
		t.Fatalf("the new process on pid %d has the old one's identity %+v", pid, id)
	}
	if got := c.Lookup(pid, "new"); got.Executable != filepath.Base(tail) {
		t.Errorf("after reuse by %s (pid %d): executable %q, want %q", tail, next.Process.Pid, got.Executable, filepath.Base(tail))
	}
	if c.Running(proc) {
		t.Error("the first process is reported running while another holds its pid")
	}
}

// reusePID starts path with args as pid, which must be free, by setting
// the kernel's last allocated pid just below it (root only) and retrying
// while other processes take it first.
func reusePID(t *testing.T, pid uint32, path string, args ...string) (*exec.Cmd, error) {
	t.Helper()
	const nsLastPID = "/proc/sys/kernel/ns_last_pid"
	if os.Geteuid() != 0 {
		return nil, errors.New("not root: cannot set " + nsLastPID)
	}
	if pid <= 1 || pid == math.MaxUint32 {
		return nil, fmt.Errorf("pid %d", pid)
	}
	for range 200 {
		if err := os.WriteFile(nsLastPID, []byte(strconv.FormatUint(uint64(pid-1), 10)), 0); err != nil {
			return nil, err
		}
		cmd := exec.Command(path, args...)
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		if uint32(cmd.Process.Pid) == pid {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			return cmd, nil
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		time.Sleep(time.Millisecond)
	}
	return nil, fmt.Errorf("pid %d was taken by other processes 200 times", pid)
}
