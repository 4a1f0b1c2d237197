package xdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// Traffic tests between two namespaces joined by a veth pair: a sends, b
// receives with the filter attached to its veth end.
//
// Addresses: a has 192.0.2.1 (from VethPair), .3 and .4, 2001:db8::1 and
// ::3; b has 192.0.2.2 and 2001:db8::2. a knows b's MAC statically, so no
// ARP or neighbour solicitation is ever sent from a blocked source (which
// the filter would drop, and count).

var (
	addrA1  = netip.MustParseAddr("192.0.2.1")
	addrA3  = netip.MustParseAddr("192.0.2.3")
	addrA4  = netip.MustParseAddr("192.0.2.4")
	addrB   = netip.MustParseAddr("192.0.2.2")
	addrA61 = netip.MustParseAddr("2001:db8::1")
	addrA63 = netip.MustParseAddr("2001:db8::3")
	addrB6  = netip.MustParseAddr("2001:db8::2")
)

// payloadLen is the UDP payload of every test packet: an 8-byte sequence
// number and padding. Frame sizes follow: 14+20+8+32 and 14+40+8+32.
const (
	payloadLen = 32
	frameLen4  = 14 + 20 + 8 + payloadLen
	frameLen6  = 14 + 40 + 8 + payloadLen
)

type pair struct {
	a, b   bpftest.Netns
	va, vb bpftest.Link
	sink   *sink
}

func newPair(t *testing.T) *pair {
	t.Helper()
	a, b := bpftest.VethPair(t)
	p := &pair{a: a, b: b, va: a.Veth(t), vb: b.Veth(t)}
	for _, addr := range []string{"192.0.2.3/24", "192.0.2.4/24"} {
		a.IP(t, "addr", "add", addr, "dev", p.va.Name)
	}
	for _, addr := range []string{"2001:db8::1/64", "2001:db8::3/64"} {
		a.IP(t, "addr", "add", addr, "dev", p.va.Name, "nodad")
	}
	b.IP(t, "addr", "add", "2001:db8::2/64", "dev", p.vb.Name, "nodad")
	for _, dst := range []string{addrB.String(), addrB6.String()} {
		a.IP(t, "neigh", "replace", dst, "lladdr", p.vb.MAC, "dev", p.va.Name, "nud", "permanent")
	}
	p.sink = newSink(t, b)
	return p
}

// sink receives the test traffic in b, on one dual-stack UDP socket, and
// remembers each packet's source and sequence number.
type sink struct {
	conn *net.UDPConn
	port int
	mu   sync.Mutex
	seqs map[netip.Addr][]uint64
	done chan struct{}
}

func newSink(t *testing.T, b bpftest.Netns) *sink {
	s := &sink{seqs: map[netip.Addr][]uint64{}, done: make(chan struct{})}
	b.Do(t, func() {
		var err error
		if s.conn, err = net.ListenUDP("udp", &net.UDPAddr{}); err != nil {
			t.Fatal(err)
		}
	})
	_ = s.conn.SetReadBuffer(4 << 20)
	s.port = s.conn.LocalAddr().(*net.UDPAddr).Port
	go func() {
		defer close(s.done)
		buf := make([]byte, 2048)
		for {
			n, from, err := s.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if n < 8 {
				continue
			}
			s.mu.Lock()
			src := from.Addr().Unmap()
			s.seqs[src] = append(s.seqs[src], binary.BigEndian.Uint64(buf))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.conn.Close(); <-s.done })
	return s
}

func (s *sink) count(src netip.Addr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seqs[src])
}

func (s *sink) received(src netip.Addr) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uint64(nil), s.seqs[src]...)
}

// sender sends numbered packets from one of a's addresses to the sink.
type sender struct {
	conn *net.UDPConn
	src  netip.Addr
	// next is the sequence number of the next packet. A packet takes its
	// number before it is written, so a number read from next at some
	// moment is lower than that of every packet written after it.
	next atomic.Uint64
}

func (p *pair) sender(t *testing.T, src netip.Addr) *sender {
	t.Helper()
	dst := addrB
	if src.Is6() {
		dst = addrB6
	}
	s := &sender{src: src}
	p.a.Do(t, func() {
		var err error
		s.conn, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
			net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(p.sink.port))))
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { s.conn.Close() })
	return s
}

// send sends n packets, pausing after every few so that the veth's
// receive ring (256 frames with native XDP) never overflows: a frame lost
// there would never reach the program, and the counts would not be exact.
func (s *sender) send(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		if err := s.sendOne(); err != nil {
			t.Fatal(err)
		}
		if i%16 == 15 {
			time.Sleep(200 * time.Microsecond)
		}
	}
}

// sendOne sends one packet; it may be called from any goroutine.
func (s *sender) sendOne() error {
	var buf [payloadLen]byte
	binary.BigEndian.PutUint64(buf[:], s.next.Add(1)-1)
	if _, err := s.conn.Write(buf[:]); err != nil {
		return fmt.Errorf("send from %s: %w", s.src, err)
	}
	return nil
}

// waitFor polls cond every 10 ms for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// counter returns one (action, reason) total of iface.
func counter(t *testing.T, f *Filter, iface string, a Action, r Reason) Counter {
	t.Helper()
	cs, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Interface == iface && c.Action == a && c.Reason == r {
			return c
		}
	}
	t.Fatalf("no counter %s/%s/%s in %+v", iface, a, r, cs)
	return Counter{}
}

// openIn opens a filter in ns (XDP attaches by ifindex in the caller's
// namespace). The links keep working after Do returns.
func openIn(t *testing.T, ns bpftest.Netns, cfg Config) (*Filter, error) {
	t.Helper()
	var (
		f   *Filter
		err error
	)
	ns.Do(t, func() { f, err = Open(cfg) })
	if err == nil {
		t.Cleanup(func() { f.Close() })
	}
	return f, err
}

// xdpOn lists the XDP programs attached to the interface in ns, asking
// the kernel both ways: our netlink query and iproute2. They must agree
// (asked again a few times, in case the state changed between them).
func xdpOn(t *testing.T, ns bpftest.Netns, l bpftest.Link) []int {
	t.Helper()
	var ids, viaIP []int
	for range 20 {
		var (
			progs []xdpProgram
			err   error
		)
		ns.Do(t, func() { progs, err = queryXDP(l.Index) })
		if err != nil {
			t.Fatal(err)
		}
		ids = nil
		for _, p := range progs {
			ids = append(ids, int(p.ID))
		}
		viaIP = ns.Link(t, l.Name).XDPProgramIDs()
		if slices.Equal(ids, viaIP) {
			return ids
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("XDP programs on %s: netlink says %v, ip -j link says %v", l.Name, ids, viaIP)
	return nil
}

// Netlink message building for attachLegacy.

func nlattr(typ uint16, payload []byte) []byte {
	b := make([]byte, 4, 4+len(payload)+3)
	binary.NativeEndian.PutUint16(b[0:], uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
