package xdp

import (
	"math"
	"net/netip"
	"slices"
)

// The program probes the table once per prefix length in the source's
// slot of the length index (table.go), so a list spread over many lengths
// costs more per packet than one of a few, most where many lengths share
// a slot. Blocklists that are
// aggregated from several feeds do spread: 20 or more IPv4 lengths. The
// table usually has room to spare (it is sized for the capacity, at most
// half full), and a prefix of length l is the same set of addresses as
// its 2^(t-l) sub-prefixes of length t: expanding the rare lengths into
// the next longer length present ("controlled prefix expansion", as in
// Srinivasan and Varghese's routing lookups) trades table entries for
// probes. expand picks, by dynamic programming, the fewest lengths whose
// expansion fits the budget, and among those the fewest entries.

// expansionBudget is how many entries a table of nBuckets buckets may
// hold after expansion: three quarters of its slots, where two-choice
// cuckoo hashing with 4-slot buckets still builds at the first seed.
func expansionBudget(nBuckets uint32) int { return int(nBuckets) * bucketSlots * 3 / 4 }

// expand returns prefixes (distinct, masked, one family) rewritten over as
// few lengths as fit in budget entries. The result holds exactly the same
// addresses.
func expand(prefixes []netip.Prefix, budget int) []netip.Prefix {
	count := map[int]int{}
	for _, p := range prefixes {
		count[p.Bits()]++
	}
	if len(count) < 2 || len(prefixes) > budget {
		return prefixes
	}
	lens := make([]int, 0, len(count))
	for l := range count {
		lens = append(lens, l)
	}
	slices.Sort(lens)
	targets := chooseLengths(lens, count, budget)
	if len(targets) == len(lens) {
		return prefixes
	}
	// to[l] is the target length that prefixes of length l expand to.
	to := map[int]int{}
	t := len(targets) - 1
	for i := len(lens) - 1; i >= 0; i-- {
		if t > 0 && lens[i] <= targets[t-1] {
			t--
		}
		to[lens[i]] = targets[t]
	}
	seen := make(map[netip.Prefix]bool, budget)
	out := make([]netip.Prefix, 0, budget)
	for _, p := range prefixes {
		n := uint64(1) << (to[p.Bits()] - p.Bits())
		for i := range n {
			q := subPrefix(p, to[p.Bits()], i)
			if !seen[q] {
				seen[q] = true
				out = append(out, q)
			}
		}
	}
	return out
}

// chooseLengths returns the target lengths (a subset of lens, ascending,
// always with the longest) for the fewest probes within budget entries.
// best[m][j] is the fewest entries for lens[0..j] with m targets, the
// last of them lens[j]; costs saturate above budget.
func chooseLengths(lens []int, count map[int]int, budget int) []int {
	k := len(lens)
	over := budget + 1
	// cost(i, j): the entries of lens[i+1..j] expanded to lens[j].
	cost := func(i, j int) int {
		total := 0
		for x := i + 1; x <= j; x++ {
			shift := lens[j] - lens[x]
			if shift >= 62 || count[lens[x]] > over>>shift {
				return over
			}
			total += count[lens[x]] << shift
			if total > budget {
				return over
			}
		}
		return total
	}
	best := make([][]int, k+1)
	from := make([][]int, k+1)
	for m := range best {
		best[m] = slices.Repeat([]int{math.MaxInt}, k)
		from[m] = make([]int, k)
	}
	for j := range k {
		best[1][j] = cost(-1, j)
	}
	for m := 2; m <= k && best[m-1][k-1] > budget; m++ {
		for j := m - 1; j < k; j++ {
			for i := m - 2; i < j; i++ {
				if best[m-1][i] > budget {
					continue
				}
				if c := best[m-1][i] + cost(i, j); c < best[m][j] {
					best[m][j], from[m][j] = c, i
				}
			}
		}
	}
	for m := 1; m <= k; m++ {
		if best[m][k-1] > budget {
			continue
		}
		targets := make([]int, m)
		for j, mm := k-1, m; mm > 0; mm-- {
			targets[mm-1] = lens[j]
			j = from[mm][j]
		}
		return targets
	}
	return lens
}

// subPrefix returns the i-th sub-prefix of p of length t: p's address
// with bits p.Bits() to t-1 set to i (t - p.Bits() < 64).
func subPrefix(p netip.Prefix, t int, i uint64) netip.Prefix {
	a := p.Addr().AsSlice()
	for b := t - 1; b >= p.Bits(); b-- {
		if i&1 != 0 {
			a[b/8] |= 0x80 >> (b % 8)
		}
		i >>= 1
	}
	addr, _ := netip.AddrFromSlice(a)
	return netip.PrefixFrom(addr, t)
}
