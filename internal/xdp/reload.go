package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// Reload replaces the whole blocklist with prefixes (config entries
// included: pass them again to keep them). Every prefix must pass the
// prefix policy (Config.MinPrefixLen4, MinPrefixLen6, PermitBlockAll)
// and each family must fit its capacity, or nothing changes. It builds
// new tables and swaps them in; when it returns nil, every packet the
// programs see from then on is checked against the new list, and no
// program still reads the old one. On error (a *ReloadError, or
// ErrClosed) the old list stays in force; the error is counted in Stats.
func (f *Filter) Reload(prefixes []netip.Prefix) error {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	err := f.reloadLocked(prefixes)
	f.countReload(err)
	return err
}

// reloadLocked does Reload's work without counting; the caller holds
// reloadMu.
func (f *Filter) reloadLocked(prefixes []netip.Prefix) error {
	f.mu.Lock()
	closed, cur4, cur6 := f.closed, f.cur4, f.cur6
	f.mu.Unlock()
	if closed {
		return ErrClosed
	}

	v4, v6 := normalize(prefixes)
	if err := f.policy.checkAll(v4); err != nil {
		return err
	}
	if err := f.policy.checkAll(v6); err != nil {
		return err
	}
	if err := f.checkCapacity(len(v4), len(v6), ""); err != nil {
		return err
	}

	// Build whatever changed, off to the side.
	var new4, new6 *ebpf.Map
	closeNew := func() {
		for _, m := range []*ebpf.Map{new4, new6} {
			if m != nil {
				m.Close()
			}
		}
	}
	var err error
	if f.block4.inner == nil || !slices.Equal(v4, cur4) {
		if new4, err = f.block4.build(v4); err != nil {
			return reloadErr(FailureInstall, err)
		}
	}
	if f.block6.inner == nil || !slices.Equal(v6, cur6) {
		if new6, err = f.block6.build(v6); err != nil {
			closeNew()
			return reloadErr(FailureInstall, err)
		}
	}

	// Swap, IPv4 then IPv6. If the second swap fails, the first is
	// undone: one list in force, not half of two.
	var old4, old6 *ebpf.Map
	if new4 != nil {
		if old4, err = f.block4.swap(new4); err != nil {
			closeNew()
			return reloadErr(FailureInstall, err)
		}
	}
	if new6 != nil {
		if old6, err = f.block6.swap(new6); err != nil {
			if new4 != nil && old4 != nil {
				if _, rerr := f.block4.swap(old4); rerr != nil {
					err = errors.Join(err, fmt.Errorf("restoring the IPv4 blocklist: %w", rerr))
				}
			}
			if new4 != nil && f.block4.inner == new4 {
				// Could not be undone: the new IPv4 list is in force.
				f.mu.Lock()
				f.cur4 = v4
				f.mu.Unlock()
				new4 = nil
			}
			closeNew()
			return reloadErr(FailureInstall, err)
		}
	}
	// The outer maps hold their own references to the tables in force;
	// ours to the replaced ones can go, and the kernel frees them.
	for _, m := range []*ebpf.Map{old4, old6} {
		if m != nil {
			m.Close()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if new4 != nil {
		f.cur4 = v4
	}
	if new6 != nil {
		f.cur6 = v6
	}
	return nil
}

// checkCapacity refuses lists larger than the tables were sized for;
// source names where the prefixes came from, for the message.
func (f *Filter) checkCapacity(n4, n6 int, source string) error {
	var errs []error
	for _, c := range []struct {
		family, key string
		n           int
		capacity    uint32
	}{{"IPv4", "capacity_ipv4", n4, f.cfg.Capacity4}, {"IPv6", "capacity_ipv6", n6, f.cfg.Capacity6}} {
		if c.n > int(c.capacity) {
			errs = append(errs, fmt.Errorf("%sthe blocklist has %d distinct %s prefixes, more than the capacity of %d (%s); "+
				"the list is refused as a whole, not truncated", source, c.n, c.family, c.capacity, c.key))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return reloadErr(FailureCapacity, errs...)
}

// normalize splits prefixes by family, masks them and drops duplicates;
// the results are sorted.
func normalize(prefixes []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range prefixes {
		if !p.IsValid() {
			continue
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	cmp := func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	}
	slices.SortFunc(v4, cmp)
	slices.SortFunc(v6, cmp)
	return slices.Compact(v4), slices.Compact(v6)
}
