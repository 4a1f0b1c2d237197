package procinfo

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestContainerID(t *testing.T) {
	id := "4f1d8c9a0b7e6d5c4b3a29181716151413121110f0e0d0c0b0a0908070605043"
	tests := map[string]string{
		"0::/system.slice/docker-" + id + ".scope\n":                                    id,
		"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + id + ".scope\n": id,
		"12:memory:/kubepods/burstable/pod1234/" + id + "\n0::/\n":                      id,
		"0::/user.slice/user-0.slice/session-1.scope\n":                                 "",
		"0::/init.scope\n": "",
		"garbage":          "",
		"0::/system.slice/crio-" + id[:60] + ".scope\n": "",
	}
	for in, want := range tests {
		if got := ContainerID([]byte(in)); got != want {
			t.Errorf("ContainerID(%q) = %q, want %q", in, got, want)
		}
	}
}

// statLine returns a /proc/<pid>/stat line as Linux 6.x writes it (52
// fields), with the given command name and start time (field 22).
func statLine(pid uint32, comm string, start uint64) string {
	return fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 1500 0 3 0 12 7 0 0 20 0 9 0 %d "+
		"1264893952 25000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		pid, comm, pid, pid, start)
}

func TestParseStartTime(t *testing.T) {
	for _, comm := range []string{
		"vllm",
		"my server",       // spaces
		"a) b (c",         // parentheses and spaces: a parser that stops at the first ')' is off by fields
		") 1 2 3 4 5 6 (", // looks like fields
		"x)",
		"(",
		"new\nline",
		"",
	} {
		line := statLine(4242, comm, 123456789)
		got, err := parseStartTime([]byte(line))
		if err != nil || got != 123456789 {
			t.Errorf("comm %q: parseStartTime = %d, %v; want 123456789", comm, got, err)
		}
	}
	// What a real process writes, read back here.
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		if _, err := parseStartTime(b); err != nil {
			t.Errorf("/proc/self/stat %q: %v", b, err)
		}
	}
	for _, bad := range []string{
		"",
		"4242 vllm S 1 2 3",                    // no parentheses
		"4242 (vllm) S 1 2 3 4 5 6 7 8 9 10\n", // too few fields
		"4242 (vllm) S 1 4242 4242 0 -1 4194560 1500 0 3 0 12 7 0 0 20 0 9 0 12x 1 2\n", // not a number
		"4242 (vllm)  S 1\n", // two spaces: fields are off
	} {
		if got, err := parseStartTime([]byte(bad)); err == nil {
			t.Errorf("parseStartTime(%q) = %d, want an error", bad, got)
		}
	}
	// A line cut after field 22 (a short read) still has it.
	line := statLine(7, "x", 99)
	cut := line[:strings.Index(line, " 99 ")+3]
	if got, err := parseStartTime([]byte(cut)); err != nil || got != 99 {
		t.Errorf("parseStartTime(%q) = %d, %v; want 99", cut, got, err)
	}
}

// fakeProc is a directory laid out as /proc is, for Cache.root.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

// start makes pid a process started at start (clock ticks), running exe
// ("" for an exe link that cannot be read) in the cgroup cgroup.
func (f *fakeProc) start(pid uint32, comm string, start uint64, exe, cgroup string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.FormatUint(uint64(pid), 10))
	if err := os.RemoveAll(dir); err != nil {
		f.t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(statLine(pid, comm, start)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if exe != "" {
		// Readlink needs no target.
		if err := os.Symlink(exe, filepath.Join(dir, "exe")); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// exit removes pid's process.
func (f *fakeProc) exit(pid uint32) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, strconv.FormatUint(uint64(pid), 10))); err != nil {
		f.t.Fatal(err)
	}
}

const (
	idA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	idB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func podCgroup(id string) string {
	return "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + id + ".scope\n"
}

func TestLookupPIDReuse(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(4242, "vllm", 1000, "/usr/bin/vllm", podCgroup(idA))
	if got, want := c.Lookup(4242, "comm"), (Info{"vllm", idA}); got != want {
		t.Fatalf("first process: %+v, want %+v", got, want)
	}
	// The same process again is answered from the cache: changing its
	// files does not show.
	if err := os.WriteFile(filepath.Join(f.root, "4242", "cgroup"), []byte(podCgroup(idB)), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Lookup(4242, "comm"), (Info{"vllm", idA}); got != want {
		t.Fatalf("same process: %+v, want %+v (from the cache)", got, want)
	}

	// The process exits and another, in another pod, gets its pid.
	f.exit(4242)
	f.start(4242, "curl", 1500, "/usr/bin/curl", podCgroup(idB))
	if got, want := c.Lookup(4242, "comm"), (Info{"curl", idB}); got != want {
		t.Fatalf("after pid reuse: %+v, want %+v, not the earlier process's", got, want)
	}
	// And one without a container, whose exe cannot be read.
	f.exit(4242)
	f.start(4242, "sshd", 2500, "", "0::/system.slice/ssh.service\n")
	if got, want := c.Lookup(4242, "sshd"), (Info{"sshd", ""}); got != want {
		t.Fatalf("after second pid reuse: %+v, want %+v", got, want)
	}
}

// A command name with spaces and parentheses cannot make the cache take
// another field for the start time and so miss a reused pid.
func TestLookupCommWithSpacesAndParens(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	// A parser that stopped at the first ')' would read field 22 of
	// "a) S 1 2 ..." as a constant, the same for both processes.
	comm := "a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 7 (b"
	f.start(31337, comm, 1000, "/usr/bin/python3", podCgroup(idA))
	if got, want := c.Lookup(31337, "x"), (Info{"python3", idA}); got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
	f.exit(31337)
	f.start(31337, comm, 1001, "/usr/bin/python3", podCgroup(idB))
	if got, want := c.Lookup(31337, "x"), (Info{"python3", idB}); got != want {
		t.Fatalf("after pid reuse: %+v, want %+v", got, want)
	}
	if id, err := c.identify(31337); err != nil || id.start != 1001 {
		t.Errorf("identify = %+v, %v; want start 1001", id, err)
	}
}

func TestLookupVanishedProcess(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(500, "vllm", 1000, "/usr/bin/vllm", podCgroup(idA))
	if got := c.Lookup(500, "vllm"); got.ContainerID != idA {
		t.Fatalf("%+v", got)
	}
	f.exit(500)
	// With the pid alone the cache cannot know that the caller's pid came
	// from the process it saw: another may have held the pid and exited
	// since. Only the fallback.
	if got, want := c.Lookup(500, "comm"), (Info{"comm", ""}); got != want {
		t.Errorf("pid of a process that is gone: %+v, want %+v", got, want)
	}
	// Nor once another process has the pid.
	f.start(500, "curl", 1200, "/usr/bin/curl", podCgroup(idB))
	if got, want := c.Lookup(500, "comm"), (Info{"curl", idB}); got != want {
		t.Errorf("pid taken over: %+v, want %+v", got, want)
	}
	// Never seen, gone.
	if got, want := c.Lookup(501, "comm"), (Info{"comm", ""}); got != want {
		t.Errorf("unknown pid: %+v, want %+v", got, want)
	}
}

// A process that takes over a pid within the start time's tick (10 ms) is
// told apart by the inode of its /proc/<pid>/stat.
func TestLookupPIDReuseWithinATick(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(4242, "vllm", 1000, "/usr/bin/vllm", podCgroup(idA))
	if got, want := c.Lookup(4242, "comm"), (Info{"vllm", idA}); got != want {
		t.Fatalf("first process: %+v, want %+v", got, want)
	}
	// Same start time, new /proc entry: the new files are made before the
	// old ones go, so their inodes differ.
	old := filepath.Join(f.root, "4242")
	if err := os.Rename(old, old+".old"); err != nil {
		t.Fatal(err)
	}
	f.start(4242, "curl", 1000, "/usr/bin/curl", podCgroup(idB))
	if err := os.RemoveAll(old + ".old"); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Lookup(4242, "comm"), (Info{"curl", idB}); got != want {
		t.Fatalf("after pid reuse within a tick: %+v, want %+v", got, want)
	}
}

// A pid taken over while Lookup reads exe and cgroup: what was read may be
// either process's, so it is neither returned nor cached.
func TestLookupPIDReusedWhileReading(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(600, "vllm", 1000, "/usr/bin/vllm", "")
	dir := filepath.Join(f.root, "600")
	cgroup := filepath.Join(dir, "cgroup")
	if err := os.Remove(cgroup); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(cgroup, 0o600); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() {
		// Opening for writing waits for Lookup to open the cgroup file.
		w, err := os.OpenFile(cgroup, os.O_WRONLY, 0)
		if err != nil {
			done <- err
			return
		}
		defer w.Close()
		// Now the process exits and another takes its pid.
		if err := os.Rename(dir, dir+".old"); err != nil {
			done <- err
			return
		}
		f.start(600, "curl", 1100, "/usr/bin/curl", podCgroup(idB))
		_, err = w.WriteString(podCgroup(idA))
		done <- err
	}()
	if got, want := c.Lookup(600, "comm"), (Info{"comm", ""}); got != want {
		t.Errorf("pid reused during the lookup: %+v, want %+v", got, want)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := c.Lookup(600, "comm"), (Info{"curl", idB}); got != want {
		t.Errorf("next lookup: %+v, want %+v", got, want)
	}
}

// The fallback names the process whenever exe cannot be read, per call: a
// first caller without one does not leave the others without a name.
func TestFallbackIsPerCall(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(88, "python3", 1000, "", podCgroup(idA))
	if got, want := c.Lookup(88, ""), (Info{"", idA}); got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if got, want := c.Lookup(88, "python3"), (Info{"python3", idA}); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}

func TestCacheIsBounded(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 4)
	for pid := range uint32(10) {
		f.start(pid+100, "p", uint64(pid), "/bin/p", podCgroup(idA))
		c.Lookup(pid+100, "")
		if n := len(c.byPID); n > 4 {
			t.Fatalf("%d entries, bound 4", n)
		}
	}
}

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

// helperThreadsEnv makes the test binary a process with that many threads
// that waits to be killed, for BenchmarkLookup.
const helperThreadsEnv = "PROCINFO_TEST_HELPER_THREADS"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(helperThreadsEnv)); err == nil {
		for range n {
			go func() {
				runtime.LockOSThread() // one thread each
				for {
					time.Sleep(time.Hour)
				}
			}()
		}
		for {
			time.Sleep(time.Hour)
		}
	}
	os.Exit(m.Run())
}

// BenchmarkLookup measures a lookup of a cached process, which costs the
// reading of /proc/<pid>/stat, and for comparison that reading alone. The
// kernel sums the times of every thread into /proc/<pid>/stat, so the
// target's thread count matters.
func BenchmarkLookup(b *testing.B) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		b.Skip(err)
	}
	one := exec.Command(sleep, "600")
	many := exec.Command(os.Args[0], "-test.run=^$")
	many.Env = append(os.Environ(), helperThreadsEnv+"=200")
	for _, cmd := range []*exec.Cmd{one, many} {
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	// Let the helper start its threads.
	for deadline := time.Now().Add(5 * time.Second); ; {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", many.Process.Pid))
		if bytes.Contains(status, []byte("\nThreads:\t20")) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the helper did not start 200 threads: %s", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	targets := []struct {
		name string
		pid  int
	}{
		{"1-thread", one.Process.Pid},
		{"200-threads", many.Process.Pid},
	}
	for _, tg := range targets {
		b.Run("hit/"+tg.name, func(b *testing.B) {
			c := NewCache(16)
			pid := uint32(tg.pid)
			want := c.Lookup(pid, "x")
			for b.Loop() {
				if got := c.Lookup(pid, "x"); got != want {
					b.Fatalf("%+v, want %+v", got, want)
				}
			}
		})
		b.Run("stat/"+tg.name, func(b *testing.B) {
			c := NewCache(16)
			for b.Loop() {
				if _, err := c.identify(uint32(tg.pid)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("miss/"+tg.name, func(b *testing.B) {
			pid := uint32(tg.pid)
			for b.Loop() {
				c := NewCache(16)
				c.Lookup(pid, "x")
			}
		})
	}
	// One cheap system call, for scale: hit costs about four of them.
	b.Run("getppid", func(b *testing.B) {
		for b.Loop() {
			unix.Getppid()
		}
	})
	b.Run("gone", func(b *testing.B) {
		c := NewCache(16)
		for b.Loop() {
			c.Lookup(1<<30, "x")
		}
	})
}
