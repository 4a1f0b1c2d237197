package procinfo

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

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
	wantLookup(t, c, 4242, "comm", Info{"vllm", idA}, "first process")
	// The same process again is answered from the cache: changing its
	// files does not show.
	if err := os.WriteFile(filepath.Join(f.root, "4242", "cgroup"), []byte(podCgroup(idB)), 0o644); err != nil {
		t.Fatal(err)
	}
	wantLookup(t, c, 4242, "comm", Info{"vllm", idA}, "same process (from the cache)")

	// The process exits and another, in another pod, gets its pid.
	f.exit(4242)
	f.start(4242, "curl", 1500, "/usr/bin/curl", podCgroup(idB))
	wantLookup(t, c, 4242, "comm", Info{"curl", idB}, "after pid reuse, not the earlier process's")
	// And one without a container, whose exe cannot be read.
	f.exit(4242)
	f.start(4242, "sshd", 2500, "", "0::/system.slice/ssh.service\n")
	wantLookup(t, c, 4242, "sshd", Info{"sshd", ""}, "after second pid reuse")
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
	wantLookup(t, c, 31337, "x", Info{"python3", idA}, "first process")
	f.exit(31337)
	f.start(31337, comm, 1001, "/usr/bin/python3", podCgroup(idB))
	wantLookup(t, c, 31337, "x", Info{"python3", idB}, "after pid reuse")
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
	wantLookup(t, c, 500, "comm", Info{"comm", ""}, "pid of a process that is gone")
	// Nor once another process has the pid.
	f.start(500, "curl", 1200, "/usr/bin/curl", podCgroup(idB))
	wantLookup(t, c, 500, "comm", Info{"curl", idB}, "pid taken over")
	// Never seen, gone.
	wantLookup(t, c, 501, "comm", Info{"comm", ""}, "unknown pid")
}

// A process that takes over a pid within the start time's tick (10 ms) is
// told apart by the inode of its /proc/<pid>/stat.
func TestLookupPIDReuseWithinATick(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(4242, "vllm", 1000, "/usr/bin/vllm", podCgroup(idA))
	wantLookup(t, c, 4242, "comm", Info{"vllm", idA}, "first process")
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
	wantLookup(t, c, 4242, "comm", Info{"curl", idB}, "after pid reuse within a tick")
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
	wantLookup(t, c, 600, "comm", Info{"comm", ""}, "pid reused during the lookup")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantLookup(t, c, 600, "comm", Info{"curl", idB}, "next lookup")
}

// The fallback names the process whenever exe cannot be read, per call: a
// first caller without one does not leave the others without a name.
func TestFallbackIsPerCall(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(88, "python3", 1000, "", podCgroup(idA))
	wantLookup(t, c, 88, "", Info{"", idA}, "caller without a fallback")
	wantLookup(t, c, 88, "python3", Info{"python3", idA}, "next caller, with one")
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

// wantLookup fails the test unless c describes pid (fallback given) as
// want; step names the moment in the failure.
func wantLookup(t *testing.T, c *Cache, pid uint32, fallback string, want Info, step string) {
	t.Helper()
	if got := c.Lookup(pid, fallback); got != want {
		t.Fatalf("%s: %+v, want %+v", step, got, want)
	}
}

// Running: a process whose /proc entry the kernel made again (a new inode
// number, as after dropping it from its caches) is still running; one
// that took its pid within the same tick, with another executable or in
// another container, is not, nor is any after it exited.
func TestRunningThroughANewInode(t *testing.T) {
	f := newFakeProc(t)
	c := newCacheAt(f.root, 16)
	f.start(4242, "vllm", 1000, "/usr/bin/vllm", podCgroup(idA))
	p, ok := c.Describe(4242, "comm")
	if !ok || !c.Running(p) {
		t.Fatalf("Describe: %+v ok=%v, want vllm running", p, ok)
	}
	// The old files stay (moved aside) so that no new file reuses their
	// inode numbers, as procfs's never do.
	remakes := 0
	remake := func(exe, cgroup string) {
		remakes++
		old := filepath.Join(f.root, "4242")
		if err := os.Rename(old, filepath.Join(f.root, "old"+strconv.Itoa(remakes))); err != nil {
			t.Fatal(err)
		}
		f.start(4242, "vllm", 1000, exe, cgroup)
	}
	remake("/usr/bin/vllm", podCgroup(idA))
	if id, err := c.identify(4242); err != nil || id.ino == p.id.ino {
		t.Fatalf("the remade entry's identity %+v (%v), want a new inode", id, err)
	}
	if !c.Running(p) {
		t.Error("vllm reported gone after its /proc entry was made again")
	}
	remake("/usr/bin/curl", podCgroup(idA))
	if c.Running(p) {
		t.Error("vllm reported running while curl holds its pid")
	}
	remake("/usr/bin/vllm", podCgroup(idB))
	if c.Running(p) {
		t.Error("vllm reported running while a vllm of another container holds its pid")
	}
	remake("/usr/bin/vllm", podCgroup(idA))
	if !c.Running(p) {
		t.Error("vllm reported gone after its /proc entry was made again a second time")
	}
	f.exit(4242)
	if c.Running(p) {
		t.Error("vllm reported running after it exited")
	}
}
