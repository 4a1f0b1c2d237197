// Package procinfo names the process behind a pid for resource attributes:
// its executable and, when its cgroup shows one, its container ID (so that
// the k8sattributes processor can add pod metadata).
//
// Pids are reused: once a process has exited, the kernel may give its pid
// to a new one, in another container or pod. So the cache knows a process
// by its pid and its start time (field 22 of /proc/<pid>/stat, in clock
// ticks since boot), and checks both on every lookup: a process that took
// over the pid of one it has cached is read afresh, never given the
// earlier one's executable or container.
//
// The start time alone can repeat: it counts 10 ms ticks, and a pid can be
// handed out again within one tick when nearly every pid is taken or when
// a privileged process steers the allocation (ns_last_pid, clone3's
// set_tid; TestRealProcessExitAndPIDReuse does it and gets the same
// tick). The cache therefore also compares the inode number of the
// /proc/<pid>/stat it opened: procfs makes a new inode when a new
// process's entry is looked up, so a reused pid shows a new number. (The
// same process can show a new number too, when the kernel drops an unused
// entry from its caches; that costs one more reading of /proc, nothing
// else.)
package procinfo

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Info describes a process.
type Info struct {
	Executable  string
	ContainerID string
}

// identity tells apart the processes that hold one pid in turn.
type identity struct {
	start uint64 // field 22 of /proc/<pid>/stat, clock ticks since boot
	ino   uint64 // inode number of /proc/<pid>/stat
}

// entry is what the cache learnt of one process.
type entry struct {
	id          identity
	exe         string // base name of /proc/<pid>/exe; "" when it could not be read
	containerID string
}

// Cache remembers Info per process, up to a bound. It is safe for
// concurrent use.
type Cache struct {
	root string // /proc, replaced in tests
	max  int

	mu sync.Mutex
	// byPID holds the latest process seen on each pid; it answers only
	// for a lookup that finds the same identity on that pid.
	byPID map[uint32]entry
}

// NewCache returns a cache of at most max processes reading /proc.
func NewCache(max int) *Cache {
	return newCacheAt("/proc", max)
}

func newCacheAt(root string, max int) *Cache {
	return &Cache{root: root, max: max, byPID: map[uint32]entry{}}
}

// Lookup describes the process that holds pid now. fallback names the
// executable when /proc/<pid>/exe cannot be read (reading it needs ptrace
// access; the caller passes the thread name from the kernel record), and
// when no process holds pid any more.
//
// Every call reads /proc/<pid>/stat (open, fstat, read, close) to tell
// whether the process is the one cached. When the process is gone, Lookup
// cannot tell which process the caller's pid came from (another may have
// held the pid and exited since the cache saw it) and returns fallback
// alone, without a container ID.
func (c *Cache) Lookup(pid uint32, fallback string) Info {
	id, err := c.identify(pid)
	if err != nil {
		return Info{Executable: fallback}
	}
	c.mu.Lock()
	e, ok := c.byPID[pid]
	c.mu.Unlock()
	if ok && e.id == id {
		return e.info(fallback)
	}
	if e, ok = c.read(pid, id); !ok {
		return Info{Executable: fallback}
	}
	c.mu.Lock()
	if len(c.byPID) >= c.max {
		clear(c.byPID) // a periodic reset also drops processes that are gone
	}
	c.byPID[pid] = e
	c.mu.Unlock()
	return e.info(fallback)
}

// read reads the executable and the cgroup of the process on pid whose
// identity is id. It fails when the process on pid after the reads is not
// that one: the files read may then be another process's.
func (c *Cache) read(pid uint32, id identity) (entry, bool) {
	e := entry{id: id}
	dir := filepath.Join(c.root, strconv.FormatUint(uint64(pid), 10))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		e.exe = filepath.Base(exe)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		e.containerID = ContainerID(b)
	}
	if now, err := c.identify(pid); err != nil || now != id {
		return entry{}, false
	}
	return e, true
}

func (e entry) info(fallback string) Info {
	info := Info{Executable: e.exe, ContainerID: e.containerID}
	if info.Executable == "" {
		info.Executable = fallback
	}
	return info
}

// statSize is what is read of /proc/<pid>/stat: its whole line (52
// fields of at most 20 digits and the command name) fits, and field 22
// comes well before the end anyway.
const statSize = 1280

// identify returns the identity of the process on pid, with four system
// calls (open, fstat, one read, close) and no allocation beyond the path:
// procfs returns the whole line in the first read when the buffer holds it.
func (c *Cache) identify(pid uint32) (identity, error) {
	path := c.root + "/" + strconv.FormatUint(uint64(pid), 10) + "/stat"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return identity{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return identity{}, err
	}
	var buf [statSize]byte
	n, err := unix.Read(fd, buf[:])
	for err == unix.EINTR {
		n, err = unix.Read(fd, buf[:])
	}
	if err != nil {
		return identity{}, err
	}
	start, err := parseStartTime(buf[:n])
	if err != nil {
		return identity{}, err
	}
	return identity{start: start, ino: st.Ino}, nil
}

// errStat is returned for contents of /proc/<pid>/stat without a start
// time.
var errStat = errors.New("procinfo: malformed /proc/<pid>/stat")

// parseStartTime returns field 22 (starttime) of the contents of
// /proc/<pid>/stat. The second field is the command name in parentheses,
// which may itself hold spaces and parentheses (a process names its
// threads as it likes), so fields are counted from the last ')', after
// which none of them can hold one.
func parseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errStat
	}
	rest := stat[i+1:]
	// rest is " <state> <ppid> ...": field 3 onwards, each after one space.
	for field := 3; ; field++ {
		if len(rest) == 0 || rest[0] != ' ' {
			return 0, errStat
		}
		rest = rest[1:]
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		if field == 22 {
			v, err := strconv.ParseUint(string(rest[:end]), 10, 64)
			if err != nil {
				return 0, errStat
			}
			return v, nil
		}
		rest = rest[end:]
	}
}

// containerIDPattern matches the 64-hex-digit IDs that Docker, containerd
// and CRI-O put in cgroup paths (docker-<id>.scope, cri-containerd-<id>,
// crio-<id>, /docker/<id>, kubepods/.../<id>).
var containerIDPattern = regexp.MustCompile(`(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$`)

// ContainerID extracts a container ID from the contents of
// /proc/<pid>/cgroup, or returns "".
func ContainerID(cgroup []byte) string {
	for _, line := range strings.Split(string(cgroup), "\n") {
		line = strings.TrimSuffix(line, "\r")
		// hierarchy-ID:controllers:path
		if i := lastColon(line); i >= 0 {
			if m := containerIDPattern.FindStringSubmatch(line[i+1:]); m != nil {
				return m[1]
			}
		}
	}
	return ""
}

func lastColon(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return i
		}
	}
	return -1
}

// Process is one process as the cache saw it: its pid, what tells it
// apart from later holders of that pid, and its Info then.
type Process struct {
	PID uint32
	Info
	id identity
}

// Describe returns the process that holds pid now, read once: ok is false
// when no process holds it. Keep the Process to name a process by what it
// was, whatever holds the pid later.
func (c *Cache) Describe(pid uint32, fallback string) (p Process, ok bool) {
	id, err := c.identify(pid)
	if err != nil {
		return Process{PID: pid, Info: Info{Executable: fallback}}, false
	}
	info := c.Lookup(pid, fallback)
	if id2, err := c.identify(pid); err != nil || id2 != id {
		return Process{PID: pid, Info: Info{Executable: fallback}}, false
	}
	return Process{PID: pid, Info: info, id: id}, true
}

// Running reports whether p still holds its pid. A new inode number with
// the same start time is either p, whose /proc entry the kernel dropped
// from its caches and made again, or a process that took the pid within
// the tick: the executable and container, read again, tell them apart as
// far as anything named after p is concerned.
func (c *Cache) Running(p Process) bool {
	id, err := c.identify(p.PID)
	if err != nil || p.id == (identity{}) || id.start != p.id.start {
		return false
	}
	if id.ino == p.id.ino {
		return true
	}
	e, ok := c.read(p.PID, id)
	return ok && e.info(p.Executable) == p.Info
}
