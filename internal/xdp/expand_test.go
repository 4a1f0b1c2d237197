package xdp

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// checkExpansion checks that the expanded prefixes got hold the same
// addresses as orig: each lies inside an original prefix, and the first,
// the last and random addresses of each original prefix lie in one of
// them.
func checkExpansion(t *testing.T, orig, got []netip.Prefix) {
	t.Helper()
	set := map[netip.Prefix]bool{}
	lens := map[int]bool{}
	for _, q := range got {
		set[q], lens[q.Bits()] = true, true
	}
	inGot := func(a netip.Addr) bool {
		for l := range lens {
			if p, err := a.Prefix(l); err == nil && set[p] {
				return true
			}
		}
		return false
	}
	origSet := map[netip.Prefix]bool{}
	for _, p := range orig {
		origSet[p] = true
	}
	for _, q := range got {
		in := false
		for l := 0; l <= q.Bits() && !in; l++ {
			p, _ := q.Addr().Prefix(l)
			in = origSet[p]
		}
		if !in {
			t.Fatalf("%s is in no original prefix", q)
		}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, p := range orig {
		probes := []netip.Addr{p.Addr(), lastAddr(p)}
		for range 8 {
			a := randomAddr(r, p.Addr().Is6()).AsSlice()
			b := p.Addr().AsSlice()
			for i := range p.Bits() {
				m := byte(0x80 >> (i % 8))
				a[i/8] = a[i/8]&^m | b[i/8]&m
			}
			addr, _ := netip.AddrFromSlice(a)
			probes = append(probes, addr)
		}
		for _, a := range probes {
			if !inGot(a) {
				t.Fatalf("%s of %s is not in the expanded list", a, p)
			}
		}
	}
}

func TestExpand(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	// One /24 among /32s: within budget it becomes 256 /32s.
	list := pp("192.0.2.0/24", "198.51.100.1/32", "198.51.100.2/32")
	got := expand(list, 300)
	if len(got) != 258 || got[0].Bits() != 32 {
		t.Errorf("expand: %d prefixes, first %v", len(got), got[0])
	}
	checkExpansion(t, list, got)
	// No room: unchanged.
	if got := expand(list, 100); !slices.Equal(got, list) {
		t.Errorf("over budget: %v", got)
	}
	// Overlaps merge: 192.0.2.0/31 expanded to /32 meets 192.0.2.1/32.
	list = pp("192.0.2.0/31", "192.0.2.1/32")
	if got := expand(list, 10); len(got) != 2 || got[0] != netip.MustParsePrefix("192.0.2.0/32") {
		t.Errorf("overlap: %v", got)
	}
}

// TestExpandMinimizesLengths checks the dynamic program against brute
// force on small random length profiles.
func TestExpandMinimizesLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		count := map[int]int{}
		var lens []int
		for _, l := range r.Perm(12)[:1+r.IntN(6)] {
			count[20+l] = 1 + r.IntN(40)
			lens = append(lens, 20+l)
		}
		slices.Sort(lens)
		budget := 50 + r.IntN(4000)
		total := 0
		for _, c := range count {
			total += c
		}
		if total > budget {
			continue
		}
		got := chooseLengths(lens, count, budget)
		// Brute force: every subset with the longest length.
		bestN, bestCost := len(lens)+1, 0
		for mask := range 1 << (len(lens) - 1) {
			var targets []int
			for i := range len(lens) - 1 {
				if mask&(1<<i) != 0 {
					targets = append(targets, lens[i])
				}
			}
			targets = append(targets, lens[len(lens)-1])
			c := 0
			for _, l := range lens {
				tgt := targets[len(targets)-1]
				for _, x := range targets {
					if x >= l {
						tgt = x
						break
					}
				}
				c += count[l] << (tgt - l)
			}
			if c <= budget && (len(targets) < bestN || len(targets) == bestN && c < bestCost) {
				bestN, bestCost = len(targets), c
			}
		}
		if len(got) != bestN {
			t.Fatalf("lengths %v counts %v budget %d: chose %v, brute force needs %d", lens, count, budget, got, bestN)
		}
	}
}
