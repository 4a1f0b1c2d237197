package xdp

import (
	"encoding/binary"
	"net/netip"
)

// referenceClassify is the filter's rules written again in Go, from the
// rule list (xdp_filter.bpf.c's header comment), not from the C code: the
// differential tests run every frame through both and fail on any
// disagreement. lists are the blocklist and the allowlist.
func referenceClassify(frame []byte, lists refLists) (Action, Reason) {
	malformed := func() (Action, Reason) { return ActionDrop, ReasonMalformed }
	pass := func() (Action, Reason) { return ActionPass, ReasonNone }
	verdict := func(src netip.Addr) (Action, Reason) { // 6.
		switch {
		case !lists.block.contains(src):
			return pass()
		case lists.allow.contains(src):
			return ActionPass, ReasonAllowlist
		}
		return ActionDrop, ReasonBlocklist
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

// refLists are the reference's lists.
type refLists struct{ block, allow prefixSet }

// prefixSet is one list for the reference: a linear scan with
// netip.Prefix.Contains, independent of the kernel's hash tables (no
// masking, no keys, no lengths bitmap).
type prefixSet []netip.Prefix

func (s prefixSet) contains(a netip.Addr) bool {
	for _, p := range s {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
