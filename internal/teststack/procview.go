package teststack

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// TLSScanView is what tokenwire's scan for TLS servers reads of pid, for
// the message of a test whose server was never probed: its network
// namespace, its socket descriptors (with the local address of each that
// /proc/<pid>/net/tcp or tcp6 lists as listening), and its TLS library
// mappings (libssl, libcrypto). The scan needs a listening socket on a
// watched port, a descriptor for it, and an executable libssl mapping.
func TLSScanView(pid int) string {
	var b strings.Builder
	proc := "/proc/" + strconv.Itoa(pid)
	ns, err := os.Readlink(proc + "/ns/net")
	fmt.Fprintf(&b, "netns %s (%v)", ns, err)
	listening := map[string]string{} // inode: local address
	for _, name := range []string{"tcp", "tcp6"} {
		tab, err := os.ReadFile(proc + "/net/" + name)
		if err != nil {
			fmt.Fprintf(&b, "; %s: %v", name, err)
		}
		for _, l := range strings.Split(string(tab), "\n") {
			// sl local remote st ... inode (the tenth field)
			if f := strings.Fields(l); len(f) >= 10 && f[3] == "0A" {
				listening[f[9]] = f[1]
			}
		}
	}
	fmt.Fprintf(&b, "; %d listening sockets", len(listening))
	fds, err := os.ReadDir(proc + "/fd")
	fmt.Fprintf(&b, "\nsockets (%v):", err)
	for _, fd := range fds {
		link, err := os.Readlink(proc + "/fd/" + fd.Name())
		inode, ok := strings.CutPrefix(link, "socket:[")
		if err != nil || !ok {
			continue
		}
		fmt.Fprintf(&b, " %s", link)
		if local, ok := listening[strings.TrimSuffix(inode, "]")]; ok {
			fmt.Fprintf(&b, " (listening on %s)", local)
		}
	}
	maps, err := os.ReadFile(proc + "/maps")
	fmt.Fprintf(&b, "\nTLS library mappings (%v):", err)
	for _, l := range strings.Split(string(maps), "\n") {
		if strings.Contains(l, "libssl") || strings.Contains(l, "libcrypto") {
			fmt.Fprintf(&b, "\n  %s", l)
		}
	}
	return b.String()
}
