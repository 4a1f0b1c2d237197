// Package procinfo names the process behind a pid for resource attributes:
// its executable and, when its cgroup shows one, its container ID (so that
// the k8sattributes processor can add pod metadata).
package procinfo

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Info describes a process.
type Info struct {
	Executable  string
	ContainerID string
}

// Cache remembers Info per pid, up to a bound.
type Cache struct {
	root string // /proc, replaced in tests
	max  int

	mu    sync.Mutex
	byPID map[uint32]Info
}

// NewCache returns a cache of at most max processes reading /proc.
func NewCache(max int) *Cache {
	return &Cache{root: "/proc", max: max, byPID: map[uint32]Info{}}
}

// Lookup returns what /proc says of pid; fallback names the executable when
// the process is gone (its thread name from the kernel record).
func (c *Cache) Lookup(pid uint32, fallback string) Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	if info, ok := c.byPID[pid]; ok {
		return info
	}
	info := Info{Executable: fallback}
	dir := filepath.Join(c.root, strconv.FormatUint(uint64(pid), 10))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		info.Executable = filepath.Base(exe)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
		info.ContainerID = ContainerID(b)
	}
	if len(c.byPID) >= c.max {
		clear(c.byPID) // pids are reused; a periodic reset keeps entries fresh too
	}
	c.byPID[pid] = info
	return info
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
