package tlsprobe

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procRoot is where procfs is; tests leave it.
const procRoot = "/proc"

// pids lists the processes in procfs.
func pids() ([]uint32, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
			out = append(out, uint32(pid))
		}
	}
	return out, nil
}

func procPath(pid uint32, elem ...string) string {
	return filepath.Join(append([]string{procRoot, strconv.FormatUint(uint64(pid), 10)}, elem...)...)
}

// listeners returns the processes that hold a TCP socket listening on one
// of ports, in any network namespace. Processes for which skip returns
// true are not looked into (their descriptors are read only once).
func listeners(ports map[uint16]bool, skip func(uint32) bool) ([]uint32, error) {
	all, err := pids()
	if err != nil {
		return nil, err
	}
	// /proc/<pid>/net/tcp shows the sockets of pid's network namespace:
	// one read per namespace.
	byNS := map[string][]uint32{}
	for _, pid := range all {
		ns, err := os.Readlink(procPath(pid, "ns", "net"))
		if err != nil {
			continue // gone, or a kernel thread
		}
		byNS[ns] = append(byNS[ns], pid)
	}
	var out []uint32
	for _, members := range byNS {
		inodes := map[string]bool{}
		for _, pid := range members {
			if err := listeningInodes(pid, ports, inodes); err == nil {
				break
			}
		}
		if len(inodes) == 0 {
			continue
		}
		for _, pid := range members {
			if !skip(pid) && holdsSocket(pid, inodes) {
				out = append(out, pid)
			}
		}
	}
	return out, nil
}

// tcpListen is the state column of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// listeningInodes adds the inodes of the sockets listening on ports in
// pid's network namespace.
func listeningInodes(pid uint32, ports map[uint16]bool, inodes map[string]bool) error {
	for _, name := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(procPath(pid, "net", name))
		if err != nil {
			if name == "tcp6" && os.IsNotExist(err) {
				continue // no IPv6
			}
			return err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan() // the header
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 10 || f[3] != tcpListen {
				continue
			}
			_, hexPort, ok := strings.Cut(f[1], ":")
			port, err := strconv.ParseUint(hexPort, 16, 16)
			if ok && err == nil && ports[uint16(port)] && f[9] != "0" {
				inodes[f[9]] = true
			}
		}
	}
	return nil
}

// holdsSocket reports whether pid has a descriptor for one of the socket
// inodes.
func holdsSocket(pid uint32, inodes map[string]bool) bool {
	dir := procPath(pid, "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
			return true
		}
	}
	return false
}

// startTime is when pid started (clock ticks since boot): with the pid it
// tells a process from a later one that reuses the pid.
func startTime(pid uint32) (uint64, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from after its last ')'. starttime is field 22, the 20th
	// after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%s: no command name", procPath(pid, "stat"))
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("%s: %d fields", procPath(pid, "stat"), len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// tlsLibraries returns the shared TLS libraries pid maps (executable
// mappings of libssl.so*), as paths inside its root.
func tlsLibraries(pid uint32) ([]string, error) {
	b, err := os.ReadFile(procPath(pid, "maps"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// address perms offset dev inode pathname
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.Contains(f[1], "x") {
			continue
		}
		path := strings.Join(f[5:], " ")
		if !strings.HasPrefix(filepath.Base(path), "libssl.so") || seen[path] {
			continue
		}
		seen[path] = true
		out = append(out, path)
	}
	return out, sc.Err()
}

// inRoot is path as pid sees it, from here: through its root, so that a
// process in a container has its own library probed.
func inRoot(pid uint32, path string) string {
	return procPath(pid, "root") + path
}
