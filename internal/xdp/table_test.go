package xdp

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/bpf"
)

// tableContents reads the table in force in s back from the kernel and
// decodes it: the prefixes it holds, sorted. It also checks the table's
// invariants: every key sits in one of its two buckets, the head's
// bitmap has exactly the lengths present, and the length index
// (checkIndex) lets the program find every prefix.
func tableContents(tb testing.TB, s *tableSlot) []netip.Prefix {
	tb.Helper()
	out := readBuckets(tb, s)
	checkIndex(tb, s, out)
	return out
}

// readBuckets decodes the head and the buckets of the table in force in s.
func readBuckets(tb testing.TB, s *tableSlot) []netip.Prefix {
	tb.Helper()
	m := s.inner
	if want := tableEntries(capacityOf(s), s.v6); m.MaxEntries() != want {
		tb.Errorf("table %s has %d elements, want %d", s.name, m.MaxEntries(), want)
	}
	var out []netip.Prefix
	lens := map[int]bool{}
	if s.v6 {
		var first bpf.XDPBucket6
		if err := m.Lookup(uint32(0), &first); err != nil {
			tb.Fatal(err)
		}
		head := *(*bpf.XDPHead6)(unsafe.Pointer(&first))
		for i := uint32(1); i <= s.buckets; i++ {
			var b bpf.XDPBucket6
			if err := m.Lookup(i, &b); err != nil {
				tb.Fatal(err)
			}
			for sl := range bucketSlots {
				if b.Len[sl] == 0 {
					continue
				}
				k := key6{b.Hi[sl], b.Lo[sl], b.Len[sl]}
				sh := tableShape{head.Mask, head.Shift}
				h0, h1 := hash6(k, head.Seed[0], head.Seed[1], sh), hash6(k, head.Seed[2], head.Seed[3], sh)
				switch {
				case i-1 != h0 && i-1 != h1:
					tb.Errorf("key %+v in bucket %d, not in %d or %d", k, i-1, h0, h1)
				case i-1 != h0 && !full6(tb, m, h0):
					tb.Errorf("key %+v in its second bucket while its first is not full", k)
				}
				if sl > 0 && b.Len[sl-1] == 0 {
					tb.Errorf("bucket %d: slot %d used after a free one", i-1, sl)
				}
				var a [16]byte
				for j := range 8 {
					a[j] = byte(k.hi >> (56 - 8*j))
					a[8+j] = byte(k.lo >> (56 - 8*j))
				}
				out = append(out, netip.PrefixFrom(netip.AddrFrom16(a), int(k.tag)-1))
				lens[int(k.tag)-1] = true
			}
		}
		for l := range 129 {
			var set bool
			switch {
			case l > 64:
				set = head.Lens[0]&(1<<(128-l)) != 0
			case l > 0:
				set = head.Lens[1]&(1<<(64-l)) != 0
			default:
				set = head.Lens[2]&1 != 0
			}
			if set != lens[l] {
				tb.Errorf("IPv6 length %d: in the head's bitmap %v, present %v", l, set, lens[l])
			}
		}
	} else {
		var first bpf.XDPBucket4
		if err := m.Lookup(uint32(0), &first); err != nil {
			tb.Fatal(err)
		}
		head := *(*bpf.XDPHead4)(unsafe.Pointer(&first))
		for i := uint32(1); i <= s.buckets; i++ {
			var b bpf.XDPBucket4
			if err := m.Lookup(i, &b); err != nil {
				tb.Fatal(err)
			}
			for sl, k := range b.Slot {
				if k == 0 {
					continue
				}
				if sl > 0 && b.Slot[sl-1] == 0 {
					tb.Errorf("bucket %d: slot %d used after a free one", i-1, sl)
				}
				sh := tableShape{head.Mask, head.Shift}
				h0, h1 := hash4(k, head.Seed[0], sh), hash4(k, head.Seed[1], sh)
				switch {
				case i-1 != h0 && i-1 != h1:
					tb.Errorf("key %#x in bucket %d, not in %d or %d", k, i-1, h0, h1)
				case i-1 != h0 && !full4(tb, m, h0):
					tb.Errorf("key %#x in its second bucket while its first is not full", k)
				}
				a := uint32(k >> 8)
				l := int(k&0xff) - 1
				out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), l))
				lens[l] = true
			}
		}
		for l := range 33 {
			if set := head.Lens&(1<<(32-l)) != 0; set != lens[l] {
				tb.Errorf("IPv4 length %d: in the head's bitmap %v, present %v", l, set, lens[l])
			}
		}
	}
	slices.SortFunc(out, comparePrefixes)
	return out
}

// capacityOf returns a capacity whose tables have s's bucket count.
func capacityOf(s *tableSlot) uint32 { return 2 * s.buckets }

// checkIndex reads the length index of the table in force in s and checks
// it against the prefixes the table holds: for every prefix, the slot of
// every key it covers (a sample of at most 257 keys for a short prefix,
// both ends included) has its length, and no slot has a length that no
// prefix has.
func checkIndex(tb testing.TB, s *tableSlot, prefixes []netip.Prefix) {
	tb.Helper()
	nSlots := indexSlots(s.buckets, s.v6)
	slots := make([][2]uint64, 0, nSlots)
	for e := range indexElements(s.buckets, s.v6) {
		if s.v6 {
			var ix bpf.XDPIndex6
			if err := s.inner.Lookup(1+s.buckets+e, (*bpf.XDPBucket6)(unsafe.Pointer(&ix))); err != nil {
				tb.Fatal(err)
			}
			for j := range bpf.XDPIndex6Slots {
				slots = append(slots, [2]uint64{ix.Lens[2*j], ix.Lens[2*j+1]})
			}
		} else {
			var ix bpf.XDPIndex4
			if err := s.inner.Lookup(1+s.buckets+e, (*bpf.XDPBucket4)(unsafe.Pointer(&ix))); err != nil {
				tb.Fatal(err)
			}
			for _, l := range ix.Lens {
				slots = append(slots, [2]uint64{uint64(l), 0})
			}
		}
	}
	keyBits, width := indexKeyBits4, 32
	if s.v6 {
		keyBits, width = indexKeyBits6, 128
	}
	var present [2]uint64
	missing := 0
	for _, p := range prefixes {
		l := p.Bits()
		if l == 0 {
			continue
		}
		w, b := lengthBit(l, s.v6)
		present[w] |= b
		// The key: the address's first keyBits bits, taken from its bytes.
		a := p.Addr().AsSlice()
		var key uint64
		for i := range keyBits / 8 {
			key = key<<8 | uint64(a[i])
		}
		span := uint64(1)
		if l < keyBits {
			span = 1 << (keyBits - l)
		}
		step := max(span/256, 1)
		for i := uint64(0); i < span; i += step {
			for _, k := range []uint64{key + i, key + span - 1} {
				if slots[k&uint64(nSlots-1)][w]&b == 0 {
					if missing++; missing <= 5 {
						tb.Errorf("%s: slot %d of key %#x lacks length %d", p, k&uint64(nSlots-1), k, l)
					}
				}
			}
		}
	}
	for i, sl := range slots {
		if sl[0]&^present[0] != 0 || sl[1]&^present[1] != 0 {
			tb.Errorf("index slot %d has lengths no prefix of the %d-bit table has: %#x %#x", i, width, sl[0]&^present[0], sl[1]&^present[1])
			break
		}
	}
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func countLengths(ps []netip.Prefix) int {
	seen := map[int]bool{}
	for _, p := range ps {
		seen[p.Bits()] = true
	}
	return len(seen)
}

func full4(tb testing.TB, m *ebpf.Map, bucket uint32) bool {
	var b bpf.XDPBucket4
	if err := m.Lookup(1+bucket, &b); err != nil {
		tb.Fatal(err)
	}
	return b.Slot[bucketSlots-1] != 0
}

func full6(tb testing.TB, m *ebpf.Map, bucket uint32) bool {
	var b bpf.XDPBucket6
	if err := m.Lookup(1+bucket, &b); err != nil {
		tb.Fatal(err)
	}
	return b.Len[bucketSlots-1] != 0
}

// blocklistInKernel is the blocklist the kernel tables hold, both
// families.
func blocklistInKernel(tb testing.TB, f *Filter) []netip.Prefix {
	tb.Helper()
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	return append(tableContents(tb, f.block4), tableContents(tb, f.block6)...)
}

func TestTableShape(t *testing.T) {
	for _, c := range []struct{ buckets, shift uint32 }{{1, 63}, {2, 63}, {4, 62}, {32768, 49}} {
		if got := shapeOf(c.buckets); got != (tableShape{c.buckets - 1, c.shift}) {
			t.Errorf("shapeOf(%d) = %+v, want shift %d", c.buckets, got, c.shift)
		}
	}
}

func TestTableSize(t *testing.T) {
	for _, c := range []struct{ capacity, buckets uint32 }{
		{0, 1}, {1, 1}, {2, 1}, {3, 2}, {4, 2}, {5, 4}, {65535, 32768}, {65536, 32768}, {65537, 65536},
	} {
		if got := tableBuckets(c.capacity); got != c.buckets {
			t.Errorf("tableBuckets(%d) = %d, want %d", c.capacity, got, c.buckets)
		}
	}
	// The head, the buckets, then the length index: 8 IPv4 slots (at most
	// 2^16 of them, twice the buckets) or 4 IPv6 slots (as many as the
	// buckets) per element.
	for _, c := range []struct {
		capacity uint32
		v6       bool
		entries  uint32
	}{
		{1, false, 1 + 1 + 1}, {1, true, 1 + 1 + 1}, {5, false, 1 + 4 + 1}, {5, true, 1 + 4 + 1},
		{65536, false, 1 + 32768 + 8192}, {65536, true, 1 + 32768 + 8192},
		{MaxCapacity, false, 1 + 1<<19 + 1<<13}, {MaxCapacity, true, 1 + 1<<19 + 1<<17},
	} {
		if got := tableEntries(c.capacity, c.v6); got != c.entries {
			t.Errorf("tableEntries(%d, v6 %v) = %d, want %d", c.capacity, c.v6, got, c.entries)
		}
	}
}

// TestTablesHoldTheList: full tables (every length, both families, at
// capacity) hold exactly the list, each key where the program looks.
func TestTablesHoldTheList(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	const capacity = 4096
	list := append(randomPrefixes(r, capacity, false, everyLength(0, 32), netip.Addr{}),
		randomPrefixes(r, capacity, true, everyLength(0, 128), netip.Addr{})...)
	f, _ := loadInstanceCfg(t, Config{Capacity4: capacity, Capacity6: capacity, MinPrefixLen4: 1, MinPrefixLen6: 1, PermitBlockAll: true})
	if err := f.Reload(list); err != nil {
		t.Fatal(err)
	}
	v4, v6 := normalize(list)
	e4 := expand(v4, expansionBudget(tableBuckets(capacity)))
	e6 := expand(v6, expansionBudget(tableBuckets(capacity)))
	checkExpansion(t, v4, e4)
	checkExpansion(t, v6, e6)
	want := append(e4, e6...)
	slices.SortFunc(want, comparePrefixes)
	if got := blocklistInKernel(t, f); !slices.Equal(got, want) {
		t.Errorf("the kernel tables hold %d prefixes, want %d", len(got), len(want))
	}
	t.Logf("%d IPv4 prefixes over %d lengths, %d IPv6 over %d; in the tables: %d over %d, %d over %d",
		len(v4), countLengths(v4), len(v6), countLengths(v6), len(e4), countLengths(e4), len(e6), countLengths(e6))
}

// TestTablesMatchReference is the differential test of the lookup itself,
// at scale: random lists over many lengths, looked up by the program
// (BPF_PROG_TEST_RUN) for addresses at and around every prefix's edges and
// for random ones, against the reference's linear scan.
func TestTablesMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	f, inst := loadInstanceCfg(t, Config{MinPrefixLen4: 1, MinPrefixLen6: 1, PermitBlockAll: true,
		Allowlist: []string{"198.51.100.0/24", "2001:db8::/32"}})
	for _, tc := range []struct {
		name    string
		n       int
		weights [2]map[int]int
	}{
		// 600 prefixes per family and 1000 random addresses per family:
		// each address is one BPF_PROG_TEST_RUN, and the emulated guests
		// run the whole list.
		{"realistic", 600, [2]map[int]int{mixed4, mixed6}},
		{"every length", 600, [2]map[int]int{everyLength(1, 32), everyLength(1, 128)}},
		{"short prefixes and /0", 40, [2]map[int]int{everyLength(0, 12), everyLength(0, 20)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := append(randomPrefixes(r, tc.n, false, tc.weights[0], netip.Addr{}), randomPrefixes(r, tc.n, true, tc.weights[1], netip.Addr{})...)
			// Documentation ranges, for the allowlist.
			list = append(list, netip.MustParsePrefix("198.51.100.128/25"), netip.MustParsePrefix("2001:db8:1::/48"))
			if err := f.Reload(list); err != nil {
				t.Fatal(err)
			}
			ref := referenceLists(t, f)
			var probes []netip.Addr
			for _, p := range list {
				first := p.Addr()
				last := lastAddr(p)
				probes = append(probes, first, last, first.Prev(), last.Next())
			}
			for range 1000 {
				probes = append(probes, randomAddr(r, false), randomAddr(r, true))
			}
			disagree := 0
			for _, a := range probes {
				if !a.IsValid() {
					continue
				}
				var frame []byte
				if a.Is4() {
					frame = ether(etIPv4, nil, ipv4(a, dst4, 0, 10))
				} else {
					frame = ether(etIPv6, nil, ipv6(a, dst6, 10))
				}
				got, err := inst.prog.Run(&ebpf.RunOptions{Data: frame})
				if err != nil {
					t.Fatal(err)
				}
				wantA, wantR := referenceClassify(frame, ref)
				if Action(got) != wantA {
					if disagree++; disagree <= 10 {
						t.Errorf("%s: kernel %s, reference %s/%s", a, Action(got), wantA, wantR)
					}
				}
			}
			t.Logf("%d prefixes, %d addresses looked up", len(list), len(probes))
		})
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	out, _ := netip.AddrFromSlice(a)
	return out
}

func randomAddr(r *rand.Rand, v6 bool) netip.Addr {
	if v6 {
		var a [16]byte
		for i := range a {
			a[i] = byte(r.Uint32())
		}
		a[0] = 0x20 | a[0]&0x1f
		return netip.AddrFrom16(a)
	}
	return netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
}
