//go:build e2e

package e2e

import (
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// The XDP filter's test link: a veth pair with one end (rootIf, no address)
// in the collector's namespace, where the XDP filter attaches, and the other
// in a namespace of the test's own, from which the test writes raw Ethernet
// frames. Nothing else uses the pair, and nothing the filter passes can
// leave it: the only frames passed are ARP requests (an interface without
// addresses answers none) and IP forwarding is off on rootIf.
type xdpLink struct {
	ns     string // the test's namespace
	rootIf string // in the collector's namespace, XDP attached here
	nsIf   string // in ns
}

// Addresses of the test frames, from the documentation ranges: the
// blocklist (testdata/traces-overlay.yaml) holds 198.51.100.0/24.
var (
	blockedSrc = net.IPv4(198, 51, 100, 7).To4()
	frameDst   = net.IPv4(198, 51, 100, 1).To4()
)

// frameLen is the length of every test frame: longer than the Ethernet
// minimum (60 bytes without FCS), so no driver pads it and
// tokenwire.xdp.bytes is exactly frames x frameLen.
const frameLen = 98

// removeStaleLinks deletes the namespaces (and with them the veth pairs)
// that an e2e run killed before its cleanups left behind. Only one e2e run
// can be running: it holds the default config's fixed ports, checked
// before this is called.
func removeStaleLinks(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "twe2e") {
			t.Logf("deleting network namespace %s left by an earlier run", f[0])
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

func newXDPLink(t *testing.T) xdpLink {
	t.Helper()
	removeStaleLinks(t)
	id := randomHex(4)
	l := xdpLink{ns: "twe2e" + id, rootIf: "twe2e" + id, nsIf: "twe2ep" + id}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", l.ns)
	// Deleting the namespace deletes its veth end, and with it the pair.
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", l.ns).Run() })
	ip("link", "add", l.rootIf, "type", "veth", "peer", "name", l.nsIf, "netns", l.ns)
	// No IPv6 (no router or neighbour solicitations adding frames to the
	// counts) and no forwarding of anything that arrives on rootIf.
	for _, s := range []string{"net.ipv6.conf." + l.rootIf + ".disable_ipv6=1", "net.ipv4.conf." + l.rootIf + ".forwarding=0"} {
		if out, err := exec.Command("sysctl", "-q", "-w", s).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v: %s", s, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", l.ns, "sysctl", "-q", "-w",
		"net.ipv6.conf."+l.nsIf+".disable_ipv6=1").CombinedOutput(); err != nil {
		t.Fatalf("disabling IPv6 on %s: %v: %s", l.nsIf, err, out)
	}
	ip("-n", l.ns, "link", "set", l.nsIf, "up")
	ip("link", "set", l.rootIf, "up")
	return l
}

// send writes blocked IPv4/UDP frames from a blocklisted source,
// malformed IPv4 frames (header length 16 bytes, below the minimum 20) and
// ARP requests into the pair, from the test's namespace.
func (l xdpLink) send(t *testing.T, blocked, malformed, arp int) {
	t.Helper()
	root, err := net.InterfaceByName(l.rootIf)
	if err != nil {
		t.Fatal(err)
	}
	var sendErr error
	bpftest.Netns{Name: l.ns}.Do(t, func() {
		ifc, err := net.InterfaceByName(l.nsIf)
		if err != nil {
			sendErr = err
			return
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			sendErr = err
			return
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: ifc.Index, Halen: 6}
		copy(to.Addr[:], root.HardwareAddr)
		frames := []struct {
			n     int
			frame []byte
		}{
			{blocked, ipv4Frame(root.HardwareAddr, ifc.HardwareAddr, 5)},
			{malformed, ipv4Frame(root.HardwareAddr, ifc.HardwareAddr, 4)},
			{arp, arpFrame(ifc.HardwareAddr)},
		}
		for _, f := range frames {
			for range f.n {
				if err := unix.Sendto(fd, f.frame, 0, to); err != nil {
					sendErr = fmt.Errorf("sending a frame on %s: %w", l.nsIf, err)
					return
				}
			}
		}
	})
	if sendErr != nil {
		t.Fatal(sendErr)
	}
}

// ipv4Frame is an Ethernet frame with an IPv4/UDP packet from blockedSrc;
// ihl is the IPv4 header length in 32-bit words (5 is valid, 4 malformed).
func ipv4Frame(dst, src net.HardwareAddr, ihl byte) []byte {
	f := make([]byte, frameLen)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:14], 0x0800)
	ip := f[14:]
	ip[0] = 0x40 | ihl
	binary.BigEndian.PutUint16(ip[2:4], uint16(len(ip))) // total length
	ip[8] = 64                                           // TTL
	ip[9] = unix.IPPROTO_UDP
	copy(ip[12:16], blockedSrc)
	copy(ip[16:20], frameDst)
	binary.BigEndian.PutUint16(ip[10:12], ipChecksum(ip[:20]))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:2], 40000)
	binary.BigEndian.PutUint16(udp[2:4], 9) // discard
	binary.BigEndian.PutUint16(udp[4:6], uint16(len(udp)))
	copy(udp[8:], "tokenwire e2e")
	return f
}

// arpFrame is a broadcast ARP request for frameDst, padded to frameLen.
func arpFrame(src net.HardwareAddr) []byte {
	f := make([]byte, frameLen)
	copy(f[0:6], net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:14], 0x0806)
	a := f[14:]
	binary.BigEndian.PutUint16(a[0:2], 1)      // Ethernet
	binary.BigEndian.PutUint16(a[2:4], 0x0800) // IPv4
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:8], 1) // request
	copy(a[8:14], src)
	copy(a[14:18], net.IPv4(203, 0, 113, 2).To4())
	copy(a[24:28], frameDst)
	return f
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
