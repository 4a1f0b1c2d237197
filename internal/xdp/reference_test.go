package xdp

import (
	"encoding/binary"
	"net/netip"
)

// referenceClassify is the filter's rules written again in Go, from the
// rule list (xdp_filter.bpf.c's header comment), not from the C code: the
// differential tests run every frame through both and fail on any
// disagreement. blocked reports whether a source address is blocklisted.
func referenceClassify(frame []byte, blocked func(netip.Addr) bool) (Action, Reason) {
	malformed := func() (Action, Reason) { return ActionDrop, ReasonMalformed }
	pass := func() (Action, Reason) { return ActionPass, ReasonNone }
	verdict := func(src netip.Addr) (Action, Reason) {
		if blocked(src) {
			return ActionDrop, ReasonBlocklist
		}
		return pass()
	}

	// 1. Ethernet.
	if len(frame) < 14 {
		return malformed()
	}
	etype := binary.BigEndian.Uint16(frame[12:])
	rest := frame[14:]

	// 2. Up to two VLAN tags.
	for tags := 0; tags < 2 && (etype == tpidQ || etype == tpidAD); tags++ {
		if len(rest) < 4 {
			return malformed()
		}
		etype = binary.BigEndian.Uint16(rest[2:])
		rest = rest[4:]
	}

	switch etype {
	case etIPv4: // 3.
		if len(rest) < 20 {
			return malformed()
		}
		version, ihl := rest[0]>>4, int(rest[0]&0x0f)
		total := int(binary.BigEndian.Uint16(rest[2:]))
		switch {
		case version != 4,
			ihl < 5,
			ihl*4 > len(rest),
			total > len(rest),
			total < ihl*4:
			return malformed()
		}
		return verdict(netip.AddrFrom4([4]byte(rest[12:16])))
	case etIPv6: // 4.
		if len(rest) < 40 {
			return malformed()
		}
		if rest[0]>>4 != 6 || int(binary.BigEndian.Uint16(rest[4:])) > len(rest)-40 {
			return malformed()
		}
		return verdict(netip.AddrFrom16([16]byte(rest[8:24])))
	}
	return pass() // 5.
}

// prefixSet is the reference's blocklist: a linear scan, independent of
// the kernel's LPM trie.
type prefixSet []netip.Prefix

func (s prefixSet) blocked(a netip.Addr) bool {
	for _, p := range s {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
