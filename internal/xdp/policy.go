package xdp

import (
	"fmt"
	"net/netip"
)

// Defaults for the minimum blocklist prefix lengths (Config.MinPrefixLen4,
// Config.MinPrefixLen6).
//
// IPv4 /8: the largest block IANA ever handed to one holder, 1/256 of the
// address space. A wider entry in a blocklist is almost always a typo
// ("10.0.0.0/1" for "/16", "192.0.2.1/2" for "/32") that would drop a
// large share of the internet, management traffic included.
//
// IPv6 /32: the usual allocation to one ISP (an RIR's minimum LIR
// allocation). Blocking wider blocks several ISPs at once; per-network
// abuse is listed at /48 (a site), /56 or /64 (a customer) and /128.
const (
	DefaultMinPrefixLen4 = 8
	DefaultMinPrefixLen6 = 32
)

// prefixPolicy says which blocklist prefixes are acceptable. It exists so
// that one mistyped entry cannot cut the node off: wide prefixes are
// refused, and a prefix that blocks every source (0.0.0.0/0, ::/0) needs
// its own switch, whatever the minimum lengths say.
type prefixPolicy struct {
	min4, min6 int
	permitAll  bool
}

func (c *Config) policy() prefixPolicy {
	p := prefixPolicy{min4: c.MinPrefixLen4, min6: c.MinPrefixLen6, permitAll: c.PermitBlockAll}
	if p.min4 == 0 {
		p.min4 = DefaultMinPrefixLen4
	}
	if p.min6 == 0 {
		p.min6 = DefaultMinPrefixLen6
	}
	return p
}

// check returns why p may not be in the blocklist, or nil. p is an
// already parsed (masked, unmapped) prefix; the error starts with it.
func (pol prefixPolicy) check(p netip.Prefix) error {
	return pol.checkEntry(p.String(), p)
}

// checkEntry is check for an entry written as text, which the error
// names, with the prefix it stands for when that reads differently
// ("::ffff:10.0.0.0/100 (10.0.0.0/4) is wider than /8, ...").
func (pol prefixPolicy) checkEntry(text string, p netip.Prefix) error {
	family, key, minLen := "IPv4", "min_prefix_len_ipv4", pol.min4
	if !p.Addr().Is4() {
		family, key, minLen = "IPv6", "min_prefix_len_ipv6", pol.min6
	}
	if s := p.String(); s != text {
		text += " (" + s + ")"
	}
	if p.Bits() == 0 {
		if pol.permitAll {
			return nil
		}
		return fmt.Errorf("%s blocks every %s source; refused unless permit_block_all is set", text, family)
	}
	if p.Bits() < minLen {
		return fmt.Errorf("%s is wider than /%d, the shortest %s prefix allowed (%s)", text, minLen, family, key)
	}
	return nil
}

// checkAll returns a *ReloadError of reason FailurePolicy naming every
// refused prefix (up to maxLineErrors), or nil.
func (pol prefixPolicy) checkAll(prefixes []netip.Prefix) error {
	var msgs []error
	bad := 0
	for _, p := range prefixes {
		if err := pol.check(p); err != nil {
			if bad++; bad <= maxLineErrors {
				msgs = append(msgs, err)
			}
		}
	}
	if bad == 0 {
		return nil
	}
	if bad > maxLineErrors {
		msgs = append(msgs, fmt.Errorf("%d more refused prefixes", bad-maxLineErrors))
	}
	return reloadErr(FailurePolicy, msgs...)
}
