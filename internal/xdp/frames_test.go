package xdp

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
)

// Frame builders for the tests, by hand (gopacket is not a dependency).
// They build well-formed frames; the tests break them on purpose.

const (
	etIPv4   = 0x0800
	etIPv6   = 0x86dd
	etARP    = 0x0806
	etLLDP   = 0x88cc
	tpidQ    = 0x8100 // 802.1Q
	tpidAD   = 0x88a8 // 802.1ad
	tpid9100 = 0x9100 // pre-standard QinQ: not parsed
)

var (
	macDst = []byte{0x02, 0, 0, 0, 0, 0x02}
	macSrc = []byte{0x02, 0, 0, 0, 0, 0x01}
)

// ether builds an Ethernet frame with the given VLAN tags (TPIDs, outer
// first) around payload.
func ether(etype uint16, tags []uint16, payload []byte) []byte {
	b := append(append([]byte{}, macDst...), macSrc...)
	types := append(append([]uint16{}, tags...), etype)
	b = binary.BigEndian.AppendUint16(b, types[0])
	for i := range tags {
		b = binary.BigEndian.AppendUint16(b, uint16(100+i)) // TCI: VLAN 100, 101
		b = binary.BigEndian.AppendUint16(b, types[i+1])
	}
	return append(b, payload...)
}

// l2len is the length of the Ethernet header plus n tags.
func l2len(tags int) int { return 14 + 4*tags }

// ipv4 builds an IPv4 header with optLen bytes of options (a multiple of
// 4: NOPs, then EOL) followed by a UDP header and payload bytes.
func ipv4(src, dst netip.Addr, optLen, payload int) []byte {
	hlen := 20 + optLen
	udp := 8 + payload
	b := make([]byte, hlen+udp)
	b[0] = 0x40 | byte(hlen/4)
	binary.BigEndian.PutUint16(b[2:], uint16(hlen+udp))
	binary.BigEndian.PutUint16(b[4:], 0x1234) // identification
	b[8] = 64
	b[9] = 17 // UDP
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	for i := 20; i < hlen; i++ {
		b[i] = 1 // NOP
	}
	if optLen > 0 {
		b[hlen-1] = 0 // EOL
	}
	binary.BigEndian.PutUint16(b[10:], checksum(b[:hlen]))
	binary.BigEndian.PutUint16(b[hlen:], 40000)
	binary.BigEndian.PutUint16(b[hlen+2:], 9)
	binary.BigEndian.PutUint16(b[hlen+4:], uint16(udp))
	for i := hlen + 8; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}

// fragment sets the IPv4 fragment fields of an ipv4() header: offset in
// 8-byte units and the more-fragments flag.
func fragment(ip []byte, offset uint16, more bool) []byte {
	v := offset & 0x1fff
	if more {
		v |= 0x2000
	}
	binary.BigEndian.PutUint16(ip[6:], v)
	ip[10], ip[11] = 0, 0
	binary.BigEndian.PutUint16(ip[10:], checksum(ip[:int(ip[0]&0xf)*4]))
	return ip
}

// ipv6 builds an IPv6 header followed by a UDP header and payload bytes.
func ipv6(src, dst netip.Addr, payload int) []byte {
	udp := 8 + payload
	b := make([]byte, 40+udp)
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(udp))
	b[6] = 17
	b[7] = 64
	s, d := src.As16(), dst.As16()
	copy(b[8:], s[:])
	copy(b[24:], d[:])
	binary.BigEndian.PutUint16(b[40:], 40000)
	binary.BigEndian.PutUint16(b[42:], 9)
	binary.BigEndian.PutUint16(b[44:], uint16(udp))
	return b
}

// ipv6Frag builds an IPv6 packet whose first extension header is a
// fragment header (non-first fragment at offset 1448).
func ipv6Frag(src, dst netip.Addr, payload int) []byte {
	b := ipv6(src, dst, payload)
	b[6] = 44 // next header: fragment
	frag := []byte{17, 0, 0x05, 0xa8, 0, 0, 0, 1}
	out := append(append(append([]byte{}, b[:40]...), frag...), b[40:]...)
	binary.BigEndian.PutUint16(out[4:], uint16(len(out)-40))
	return out
}

// arp builds an ARP request from sender to target.
func arp(sender, target netip.Addr) []byte {
	b := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	b = append(b, macSrc...)
	s, d := sender.As4(), target.As4()
	b = append(b, s[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0)
	return append(b, d[:]...)
}

func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// randomFrame builds a structured pseudo-random frame: mostly plausible
// headers with one or two fields off, so that every branch of the
// classifier is exercised (random bytes would almost always be "another
// EtherType"). sources are addresses near the blocklist's edges.
func randomFrame(r *rand.Rand, sources4, sources6 []netip.Addr) []byte {
	pick := func(weights ...int) int {
		total := 0
		for _, w := range weights {
			total += w
		}
		n := r.IntN(total)
		for i, w := range weights {
			if n < w {
				return i
			}
			n -= w
		}
		return len(weights) - 1
	}
	var tags []uint16
	for range pick(6, 3, 3, 1) { // 0..3 tags
		tags = append(tags, []uint16{tpidQ, tpidAD, tpid9100}[pick(5, 5, 1)])
	}
	addr4 := func() netip.Addr {
		if r.IntN(4) == 0 {
			return netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		}
		return sources4[r.IntN(len(sources4))]
	}
	addr6 := func() netip.Addr {
		if r.IntN(4) == 0 {
			var a [16]byte
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			return netip.AddrFrom16(a)
		}
		return sources6[r.IntN(len(sources6))]
	}

	var etype uint16
	var l3 []byte
	switch pick(10, 6, 2, 1, 1) {
	case 0:
		etype = etIPv4
		l3 = ipv4(addr4(), netip.MustParseAddr("192.0.2.2"), 4*r.IntN(11), r.IntN(64))
		if r.IntN(3) == 0 {
			fragment(l3, uint16(r.IntN(400)), r.IntN(2) == 0)
		}
		switch pick(6, 1, 1, 1, 1, 1) {
		case 1: // IHL
			l3[0] = l3[0]&0xf0 | byte(r.IntN(16))
		case 2: // total length anywhere
			binary.BigEndian.PutUint16(l3[2:], uint16(r.IntN(len(l3)+40)))
		case 3: // total length at the edges
			binary.BigEndian.PutUint16(l3[2:], uint16(len(l3)+r.IntN(3)-1))
		case 4: // version
			l3[0] = byte(r.IntN(16))<<4 | l3[0]&0x0f
		case 5: // an IPv6 packet behind an IPv4 EtherType
			l3 = ipv6(addr6(), netip.MustParseAddr("2001:db8::2"), r.IntN(64))
		}
	case 1:
		etype = etIPv6
		if r.IntN(5) == 0 {
			l3 = ipv6Frag(addr6(), netip.MustParseAddr("2001:db8::2"), r.IntN(64))
		} else {
			l3 = ipv6(addr6(), netip.MustParseAddr("2001:db8::2"), r.IntN(64))
		}
		switch pick(6, 1, 1, 1, 1) {
		case 1:
			binary.BigEndian.PutUint16(l3[4:], uint16(r.IntN(len(l3))))
		case 2:
			binary.BigEndian.PutUint16(l3[4:], uint16(len(l3)-40+r.IntN(3)-1))
		case 3:
			l3[0] = byte(r.IntN(16))<<4 | l3[0]&0x0f
		case 4:
			l3 = ipv4(addr4(), netip.MustParseAddr("192.0.2.2"), 0, r.IntN(64))
		}
	case 2:
		etype = etARP
		l3 = arp(addr4(), netip.MustParseAddr("192.0.2.2"))
	case 3:
		etype = etLLDP
		l3 = make([]byte, r.IntN(64))
	default:
		etype = uint16(r.Uint32())
		l3 = make([]byte, r.IntN(64))
		for i := range l3 {
			l3[i] = byte(r.Uint32())
		}
	}
	frame := ether(etype, tags, l3)
	switch pick(6, 2, 1) {
	case 1: // cut anywhere from the Ethernet header on
		frame = frame[:14+r.IntN(len(frame)-13)]
	case 2: // Ethernet padding
		frame = append(frame, make([]byte, r.IntN(32))...)
	}
	return frame
}
