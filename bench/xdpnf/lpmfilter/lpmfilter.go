//go:build linux && amd64

// Package lpmfilter is this benchmark's deliberate baseline: tokenwire's
// XDP filter with its blocklist in LPM tries (the design the prefix tables
// of internal/xdp replaced), the same frame parsing and per-CPU counters.
// It is not part of the product; it exists so that benchmarks can measure
// both designs in the same run (internal/xdp's BenchmarkXDP, bench/xdpnf's
// xdp-lpm variant), which is why it repeats code of internal/xdp.
package lpmfilter

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Filter is one loaded copy of the baseline program with its tries.
type Filter struct {
	// Prog is the program, for BPF_PROG_TEST_RUN or to attach.
	Prog *ebpf.Program

	spec         *ebpf.CollectionSpec
	objs         lpmObjects
	capacity     uint32
	link         link.Link
	trie4, trie6 *ebpf.Map
}

// Load loads the program with empty tries of capacity prefixes per
// family.
func Load(capacity uint32) (*Filter, error) {
	spec, err := loadLpm()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{lpmMapTwbLpmBlock4, lpmMapTwbLpmBlock6} {
		spec.Maps[name].InnerMap.MaxEntries = capacity
	}
	f := &Filter{spec: spec, capacity: capacity}
	if err := spec.LoadAndAssign(&f.objs, nil); err != nil {
		return nil, fmt.Errorf("lpmfilter: %w", err)
	}
	f.Prog = f.objs.TwbXdpLpm
	if err := f.Fill(nil); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Fill replaces the blocklist: new tries, filled, then swapped in.
func (f *Filter) Fill(prefixes []netip.Prefix) error {
	var k4 []lpmTwbLpm4Key
	var k6 []lpmTwbLpm6Key
	for _, p := range prefixes {
		p = p.Masked()
		if p.Addr().Is4() {
			k4 = append(k4, lpmTwbLpm4Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As4()})
		} else {
			k6 = append(k6, lpmTwbLpm6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()})
		}
	}
	t4, err := f.newTrie(lpmMapTwbLpmBlock4, k4)
	if err != nil {
		return err
	}
	t6, err := f.newTrie(lpmMapTwbLpmBlock6, k6)
	if err != nil {
		t4.Close()
		return err
	}
	if err := f.objs.TwbLpmBlock4.Put(uint32(0), t4); err != nil {
		return errors.Join(err, t4.Close(), t6.Close())
	}
	if err := f.objs.TwbLpmBlock6.Put(uint32(0), t6); err != nil {
		return errors.Join(err, t4.Close(), t6.Close())
	}
	for _, old := range []*ebpf.Map{f.trie4, f.trie6} {
		if old != nil {
			old.Close()
		}
	}
	f.trie4, f.trie6 = t4, t6
	return nil
}

func (f *Filter) newTrie(outer string, keys any) (*ebpf.Map, error) {
	spec := f.spec.Maps[outer].InnerMap.Copy()
	spec.Name = "twb_lpm_trie"
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("lpmfilter: creating a trie: %w", err)
	}
	var n int
	switch k := keys.(type) {
	case []lpmTwbLpm4Key:
		n = len(k)
	case []lpmTwbLpm6Key:
		n = len(k)
	}
	if n > 0 {
		if _, err := m.BatchUpdate(keys, make([]uint8, n), nil); err != nil {
			m.Close()
			return nil, fmt.Errorf("lpmfilter: filling a trie: %w", err)
		}
	}
	return m, nil
}

// Attach attaches the program to the named interface in native mode, in
// the calling thread's network namespace.
func (f *Filter) Attach(ifname string) error {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return err
	}
	f.link, err = link.AttachXDP(link.XDPOptions{Program: f.Prog, Interface: ifi.Index, Flags: link.XDPDriverMode})
	return err
}

// Drops sums the drop counters (blocklist and malformed) over CPUs.
func (f *Filter) Drops() (uint64, error) {
	var n uint64
	for _, slot := range []uint32{1*3 + 1, 1*3 + 2} { // (drop, blocklist), (drop, malformed)
		var per []lpmTwbCounterValue
		if err := f.objs.TwbLpmCounters.Lookup(slot, &per); err != nil {
			return 0, err
		}
		for _, v := range per {
			n += v.Packets
		}
	}
	return n, nil
}

// Close detaches the program and frees everything.
func (f *Filter) Close() error {
	var errs []error
	if f.link != nil {
		errs = append(errs, f.link.Close())
	}
	for _, m := range []*ebpf.Map{f.trie4, f.trie6} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(append(errs, f.objs.Close())...)
}
