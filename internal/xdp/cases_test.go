package xdp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// frameCase is one frame of the table tests and the verdict it must get.
type frameCase struct {
	name   string
	frame  []byte
	action Action
	reason Reason
}

func pass(name string, frame []byte) frameCase {
	return frameCase{name, frame, ActionPass, ReasonNone}
}
func blocked(name string, frame []byte) frameCase {
	return frameCase{name, frame, ActionDrop, ReasonBlocklist}
}
func malformed(name string, frame []byte) frameCase {
	return frameCase{name, frame, ActionDrop, ReasonMalformed}
}
func allowed(name string, frame []byte) frameCase {
	return frameCase{name, frame, ActionPass, ReasonAllowlist}
}

// edit returns a copy of frame with fn applied to the bytes from off on.
func edit(frame []byte, off int, fn func(b []byte)) []byte {
	out := append([]byte{}, frame...)
	fn(out[off:])
	return out
}

func setIHL(ihl byte) func([]byte)   { return func(b []byte) { b[0] = b[0]&0xf0 | ihl } }
func setVersion(v byte) func([]byte) { return func(b []byte) { b[0] = v<<4 | b[0]&0x0f } }
func setTotal(n int) func([]byte) {
	return func(b []byte) { binary.BigEndian.PutUint16(b[2:], uint16(n)) }
}
func setPayloadLen(n int) func([]byte) {
	return func(b []byte) { binary.BigEndian.PutUint16(b[4:], uint16(n)) }
}

// frameCases lists a frame for every branch of the program. They are also
// the fuzz test's seed corpus (TestSeedCorpusIsCurrent).
func frameCases() []frameCase {
	var (
		v4      = ipv4(src4OK, dst4, 0, 18)
		v4b     = ipv4(src4Blocked, dst4, 0, 18)
		v4opt   = ipv4(src4OK, dst4, 12, 18)
		v4optB  = ipv4(src4Blocked, dst4, 40, 18) // IHL 15
		v6      = ipv6(src6OK, dst6, 18)
		v6b     = ipv6(src6Blocked, dst6, 18)
		qinq    = []uint16{tpidAD, tpidQ}
		onlyQ   = []uint16{tpidQ}
		cases   []frameCase
		add     = func(c ...frameCase) { cases = append(cases, c...) }
		mkv4    = func(src string) []byte { return ether(etIPv4, nil, ipv4(netip.MustParseAddr(src), dst4, 0, 18)) }
		mkv6    = func(src string) []byte { return ether(etIPv6, nil, ipv6(netip.MustParseAddr(src), dst6, 18)) }
		frag    = func(src netip.Addr, off uint16, more bool) []byte { return fragment(ipv4(src, dst4, 0, 64), off, more) }
		big     = ether(etIPv4, qinq, ipv4(src4Blocked, dst4, 0, maxTestFrame-l2len(2)-28))
		padded  = append(ether(etIPv4, nil, ipv4(src4OK, dst4, 0, 0)), make([]byte, 18)...)
		paddedB = append(ether(etIPv4, nil, ipv4(src4Blocked, dst4, 0, 0)), make([]byte, 18)...)
	)

	// Plain IPv4 and IPv6, and the blocklist's edges.
	add(
		pass("ipv4", ether(etIPv4, nil, v4)),
		blocked("ipv4 blocked /24", ether(etIPv4, nil, v4b)),
		blocked("ipv4 blocked /24 first", mkv4("203.0.113.0")),
		blocked("ipv4 blocked /24 last", mkv4("203.0.113.255")),
		pass("ipv4 below /24", mkv4("203.0.112.255")),
		pass("ipv4 above /24", mkv4("203.0.114.0")),
		blocked("ipv4 blocked bare address", mkv4("198.51.100.7")),
		pass("ipv4 next to bare address", mkv4("198.51.100.6")),
		blocked("ipv4 blocked via ipv4-mapped entry", mkv4("198.51.100.9")),
		blocked("ipv4 blocked /25 first", mkv4("192.0.2.128")),
		pass("ipv4 below /25", mkv4("192.0.2.127")),
		pass("ipv4 destination blocked, source not", ether(etIPv4, nil, ipv4(src4OK, src4Blocked, 0, 18))),
		pass("ipv6", ether(etIPv6, nil, v6)),
		blocked("ipv6 blocked /48", ether(etIPv6, nil, v6b)),
		blocked("ipv6 blocked /48 last", mkv6("2001:db8:bad:ffff:ffff:ffff:ffff:ffff")),
		pass("ipv6 above /48", mkv6("2001:db8:bae::")),
		blocked("ipv6 blocked bare address", mkv6("2001:db8::7")),
		pass("ipv6 next to bare address", mkv6("2001:db8::6")),
		pass("ipv6 ipv4-mapped source is not the ipv4 entry", mkv6("::ffff:198.51.100.9")),
		blocked("ipv6 blocked with fragment header", ether(etIPv6, nil, ipv6Frag(src6Blocked, dst6, 18))),
		pass("ipv6 with fragment header", ether(etIPv6, nil, ipv6Frag(src6OK, dst6, 18))),
		pass("ipv6 jumbo payload length 0", ether(etIPv6, nil, edit(v6, 0, setPayloadLen(0)))),
		blocked("full-size frame", big),
		pass("ipv4 with ethernet padding", padded),
		blocked("ipv4 blocked with ethernet padding", paddedB),
		pass("ipv6 with trailing bytes", append(ether(etIPv6, nil, v6), 1, 2, 3)),
	)

	// The allowlist: it wins over the blocklist whatever the lengths, and
	// traffic it covers that the blocklist does not is plain "none".
	add(
		allowed("ipv4 allowlisted /29 inside blocked /24, first", mkv4("203.0.113.200")),
		allowed("ipv4 allowlisted /29 inside blocked /24, last", mkv4("203.0.113.207")),
		blocked("ipv4 blocked /24 just below the allowlisted /29", mkv4("203.0.113.199")),
		blocked("ipv4 blocked /24 just above the allowlisted /29", mkv4("203.0.113.208")),
		allowed("ipv4 blocked /28 inside allowlisted /26", mkv4("198.51.100.79")),
		pass("ipv4 allowlisted /26 outside the blocked /28", mkv4("198.51.100.80")),
		pass("ipv4 allowlisted, not blocked", mkv4("192.0.2.1")),
		allowed("ipv6 allowlisted /64 inside blocked /48", mkv6("2001:db8:bad:a11::5")),
		blocked("ipv6 blocked /48 next to the allowlisted /64", mkv6("2001:db8:bad:a12::5")),
		allowed("ipv6 blocked /48 inside allowlisted /40", mkv6("2001:db8:c0b:ffff::1")),
		pass("ipv6 allowlisted /40 outside the blocked /48", mkv6("2001:db8:c0c::1")),
		pass("ipv6 allowlisted, not blocked", mkv6("2001:db8::1")),
		allowed("QinQ ipv4 allowlisted inside blocked", ether(etIPv4, qinq, ipv4(netip.MustParseAddr("203.0.113.201"), dst4, 0, 18))),
		allowed("ipv4 fragment allowlisted inside blocked", ether(etIPv4, nil, frag(netip.MustParseAddr("203.0.113.202"), 185, true))),
		malformed("ipv4 allowlisted but malformed", ether(etIPv4, nil, edit(ipv4(netip.MustParseAddr("203.0.113.200"), dst4, 0, 18), 0, setIHL(4)))),
	)

	// VLAN and QinQ.
	add(
		pass("802.1Q ipv4", ether(etIPv4, onlyQ, v4)),
		blocked("802.1Q ipv4 blocked", ether(etIPv4, onlyQ, v4b)),
		blocked("802.1ad ipv6 blocked", ether(etIPv6, []uint16{tpidAD}, v6b)),
		pass("QinQ ipv4", ether(etIPv4, qinq, v4)),
		blocked("QinQ ipv4 blocked", ether(etIPv4, qinq, v4b)),
		pass("QinQ ipv6", ether(etIPv6, qinq, v6)),
		blocked("QinQ ipv6 blocked", ether(etIPv6, qinq, v6b)),
		blocked("802.1Q in 802.1Q ipv4 blocked", ether(etIPv4, []uint16{tpidQ, tpidQ}, v4b)),
		blocked("802.1ad in 802.1ad ipv6 blocked", ether(etIPv6, []uint16{tpidAD, tpidAD}, v6b)),
		pass("three tags: not parsed", ether(etIPv4, []uint16{tpidAD, tpidQ, tpidQ}, v4b)),
		pass("0x9100 tag: not parsed", ether(etIPv4, []uint16{tpid9100}, v4b)),
		malformed("QinQ ipv4 malformed", ether(etIPv4, qinq, edit(v4, 0, setIHL(4)))),
		pass("QinQ arp", ether(etARP, qinq, arp(src4Blocked, dst4))),
	)

	// IPv4 options.
	for _, n := range []int{4, 8, 20, 40} {
		add(pass(fmt.Sprintf("ipv4 %d bytes of options", n), ether(etIPv4, nil, ipv4(src4OK, dst4, n, 10))))
	}
	add(
		blocked("ipv4 IHL 15 blocked", ether(etIPv4, nil, v4optB)),
		blocked("QinQ ipv4 IHL 15 blocked", ether(etIPv4, qinq, v4optB)),
		// 40 bytes of options claimed; the frame ends after 20 of them.
		malformed("ipv4 options cut short", ether(etIPv4, nil, edit(v4optB[:40], 0, setTotal(40)))),
		// IHL 15 with exactly 60 header bytes and nothing else.
		pass("ipv4 IHL 15, header only", ether(etIPv4, nil, edit(ipv4(src4OK, dst4, 40, 0)[:60], 0, setTotal(60)))),
	)

	// Bad IHL, version and lengths.
	for ihl := range byte(5) {
		add(malformed(fmt.Sprintf("ipv4 IHL %d", ihl), ether(etIPv4, nil, edit(v4b, 0, setIHL(ihl)))))
	}
	add(
		malformed("ipv4 total length one past the frame", ether(etIPv4, nil, edit(v4, 0, setTotal(len(v4)+1)))),
		malformed("ipv4 total length 65535", ether(etIPv4, nil, edit(v4b, 0, setTotal(65535)))),
		pass("ipv4 total length one short of the frame", ether(etIPv4, nil, edit(v4, 0, setTotal(len(v4)-1)))),
		pass("ipv4 total length equal to header", ether(etIPv4, nil, edit(v4, 0, setTotal(20)))),
		malformed("ipv4 total length less than header", ether(etIPv4, nil, edit(v4, 0, setTotal(19)))),
		malformed("ipv4 total length less than header with options", ether(etIPv4, nil, edit(v4opt, 0, setTotal(24)))),
		malformed("ipv4 total length 0", ether(etIPv4, nil, edit(v4b, 0, setTotal(0)))),
		malformed("ipv4 ethertype, version 6", ether(etIPv4, nil, v6)),
		malformed("ipv4 ethertype, version 6 blocked", ether(etIPv4, nil, v6b)),
		malformed("ipv4 ethertype, version 0", ether(etIPv4, nil, edit(v4, 0, setVersion(0)))),
		malformed("ipv4 ethertype, version 15", ether(etIPv4, nil, edit(v4b, 0, setVersion(15)))),
		malformed("ipv6 ethertype, version 4", ether(etIPv6, nil, append(append([]byte{}, v4b...), make([]byte, 20)...))),
		malformed("ipv6 ethertype, version 0", ether(etIPv6, nil, edit(v6, 0, setVersion(0)))),
		malformed("ipv6 payload length one past the frame", ether(etIPv6, nil, edit(v6b, 0, setPayloadLen(len(v6)-40+1)))),
		pass("ipv6 payload length one short of the frame", ether(etIPv6, nil, edit(v6, 0, setPayloadLen(len(v6)-40-1)))),
		malformed("ipv6 payload length 65535", ether(etIPv6, nil, edit(v6, 0, setPayloadLen(65535)))),
	)

	// Fragments: every one is checked against the blocklist.
	add(
		pass("ipv4 first fragment", ether(etIPv4, nil, frag(src4OK, 0, true))),
		pass("ipv4 middle fragment", ether(etIPv4, nil, frag(src4OK, 185, true))),
		pass("ipv4 last fragment", ether(etIPv4, nil, frag(src4OK, 370, false))),
		blocked("ipv4 first fragment blocked", ether(etIPv4, nil, frag(src4Blocked, 0, true))),
		blocked("ipv4 middle fragment blocked", ether(etIPv4, nil, frag(src4Blocked, 185, true))),
		blocked("ipv4 last fragment blocked", ether(etIPv4, nil, frag(src4Blocked, 370, false))),
		malformed("ipv4 fragment with bad IHL", ether(etIPv4, nil, edit(frag(src4OK, 185, true), 0, setIHL(3)))),
	)

	// Not IP.
	add(
		pass("arp", ether(etARP, nil, arp(src4OK, dst4))),
		pass("arp from a blocked address", ether(etARP, nil, arp(src4Blocked, dst4))),
		pass("lldp", ether(etLLDP, nil, make([]byte, 46))),
		pass("802.3 length field", ether(0x002e, nil, make([]byte, 46))),
		pass("ethernet header only, other ethertype", ether(etLLDP, nil, nil)),
		pass("arp truncated (not parsed)", ether(etARP, nil, arp(src4OK, dst4)[:3])),
	)

	// Truncation at every length, header boundaries included: every cut
	// of an IP frame loses bytes its headers claim.
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"ipv4", ether(etIPv4, nil, v4)},
		{"ipv4 options", ether(etIPv4, nil, v4opt)},
		{"ipv4 IHL 15 blocked", ether(etIPv4, nil, v4optB)},
		{"QinQ ipv4 options", ether(etIPv4, qinq, v4opt)},
		{"802.1Q ipv4 blocked", ether(etIPv4, onlyQ, v4b)},
		{"ipv6 blocked", ether(etIPv6, nil, v6b)},
		{"QinQ ipv6", ether(etIPv6, qinq, v6)},
	} {
		boundaries := headerBoundaries(tc.frame)
		for n := 14; n < len(tc.frame); n++ {
			name := fmt.Sprintf("%s cut to %d bytes", tc.name, n)
			if boundaries[n] {
				name += " (header boundary)"
			}
			add(malformed(name, tc.frame[:n]))
		}
	}
	return cases
}

// headerBoundaries returns the offsets where the headers of a
// well-formed frame end: Ethernet, each tag, the fixed IP header, options.
func headerBoundaries(frame []byte) map[int]bool {
	b := map[int]bool{14: true}
	off, et := 14, binary.BigEndian.Uint16(frame[12:])
	for et == tpidQ || et == tpidAD {
		et = binary.BigEndian.Uint16(frame[off+2:])
		off += 4
		b[off] = true
	}
	switch et {
	case etIPv4:
		b[off+20] = true
		b[off+int(frame[off]&0xf)*4] = true
		b[off+int(frame[off]&0xf)*4+8] = true // UDP
	case etIPv6:
		b[off+40] = true
		b[off+48] = true // UDP
	}
	return b
}
