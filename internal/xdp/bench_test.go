package xdp

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tokenwire/tokenwire/bench/xdpnf/lpmfilter"
	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// Prefix-length distributions of the benchmarks, as weights per length.
// mixed is a realistic blocklist: mostly /24 and /32 (IPv4), /48, /64
// and /128 (IPv6), a few others; every length the default policy allows
// is the worst case for the tables (one probe per distinct length).
var (
	mixed4 = map[int]int{24: 45, 32: 35, 16: 5, 20: 5, 22: 5, 28: 5}
	mixed6 = map[int]int{48: 30, 64: 30, 128: 25, 32: 5, 40: 5, 56: 5}
)

func everyLength(from, to int) map[int]int {
	w := map[int]int{}
	for l := from; l <= to; l++ {
		w[l] = 1
	}
	return w
}

// randomPrefixes returns n distinct random prefixes with lengths drawn
// from weights, none of which contains avoid (none: the zero Addr). The
// last two are the
// drop benchmarks' sources: the longest and the shortest length of
// weights (the first and the last length the tables probe).
func randomPrefixes(r *rand.Rand, n int, v6 bool, weights map[int]int, avoid netip.Addr) []netip.Prefix {
	lens := slices.Sorted(maps.Keys(weights))
	var pool []int
	for _, l := range lens {
		for range weights[l] {
			pool = append(pool, l)
		}
	}
	// A length can hold only so many distinct random prefixes (IPv4
	// draws the first byte from 1-223, IPv6 fixes 3 bits): past a quarter
	// of them, its draws go to the next longer length.
	room := func(bits int) int {
		free := bits - 1
		if v6 {
			free = bits - 3
		}
		if free >= 30 {
			return n
		}
		return max(1, 1<<max(free, 0)/4)
	}
	perLen := map[int]int{}
	seen := map[netip.Prefix]bool{}
	out := make([]netip.Prefix, 0, n)
	for len(out) < n {
		bits := pool[r.IntN(len(pool))]
		for perLen[bits] >= room(bits) {
			bits++
		}
		// The drop sources are drawn first, then moved to the end.
		switch {
		case len(out) == 0:
			bits = lens[len(lens)-1]
		case len(out) == 1 && n > 1:
			bits = lens[0]
		}
		var p netip.Prefix
		if v6 {
			var a [16]byte
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			a[0] = 0x20 | a[0]&0x1f // global unicast, 2000::/3
			p = netip.PrefixFrom(netip.AddrFrom16(a), bits).Masked()
		} else {
			a := [4]byte{byte(1 + r.IntN(223)), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}
			p = netip.PrefixFrom(netip.AddrFrom4(a), bits).Masked()
		}
		if seen[p] || p.Contains(avoid) {
			continue
		}
		seen[p] = true
		perLen[bits]++
		out = append(out, p)
	}
	if n < 2 {
		return out
	}
	return append(out[2:], out[1], out[0])
}

// benchImpl is one filter implementation under BPF_PROG_TEST_RUN: the
// product's prefix tables ("hash") or the LPM tries it replaced ("lpm",
// bench/xdpnf/lpmfilter), loaded with the same list.
type benchImpl struct {
	name string
	prog *ebpf.Program
}

func loadImpls(b *testing.B, list []netip.Prefix) []benchImpl {
	f, inst := loadUnheld(b, Config{})
	if err := f.Reload(list); err != nil {
		b.Fatal(err)
	}
	old, err := lpmfilter.Load(DefaultCapacity)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { old.Close() })
	if err := old.Fill(list); err != nil {
		b.Fatal(err)
	}
	return []benchImpl{{"hash", inst.prog}, {"lpm", old.Prog}}
}

// BenchmarkXDP measures the filter per packet with BPF_PROG_TEST_RUN
// (repeat = b.N), the prefix tables and the old LPM tries side by side:
// ns/pkt is the kernel's own average run time per frame (program only,
// no syscall); ns/op also contains the syscall, spread over the repeats.
// Verdicts: pass (the source in no prefix: every length probed), drop-long
// (in a /32 or /128: the first length probed) and drop-short (in a prefix
// of the shortest length: the last one). Run it with -count for min-max.
func BenchmarkXDP(b *testing.B) {
	bpftest.Require(b)
	for _, family := range []string{"ipv4", "ipv6"} {
		v6 := family == "ipv6"
		weights, passSrc := mixed4, src4OK
		if v6 {
			weights, passSrc = mixed6, src6OK
		}
		for _, n := range []int{1, 10000, 65536} {
			benchLists(b, family, fmt.Sprintf("entries=%d", n), n, v6, weights, passSrc)
		}
	}
}

// BenchmarkXDPEveryLength is BenchmarkXDP's worst case for the tables:
// 65,536 prefixes spread over every length the default policy allows
// (25 IPv4 lengths, 97 IPv6 ones).
func BenchmarkXDPEveryLength(b *testing.B) {
	bpftest.Require(b)
	benchLists(b, "ipv4", "entries=65536-lengths=25", 65536, false, everyLength(DefaultMinPrefixLen4, 32), src4OK)
	benchLists(b, "ipv6", "entries=65536-lengths=97", 65536, true, everyLength(DefaultMinPrefixLen6, 128), src6OK)
}

func benchLists(b *testing.B, family, label string, n int, v6 bool, weights map[int]int, passSrc netip.Addr) {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	list := randomPrefixes(r, n, v6, weights, passSrc)
	impls := loadImpls(b, list)
	frame := func(src netip.Addr) []byte {
		if v6 {
			return ether(etIPv6, nil, ipv6(src, dst6, 18))
		}
		return ether(etIPv4, nil, ipv4(src, dst4, 0, 18))
	}
	cases := []struct {
		verdict string
		frame   []byte
		want    Action
	}{
		{"pass", frame(passSrc), ActionPass},
		{"drop-long", frame(list[n-1].Addr()), ActionDrop},
	}
	if n > 1 {
		cases = append(cases, struct {
			verdict string
			frame   []byte
			want    Action
		}{"drop-short", frame(list[n-2].Addr()), ActionDrop})
	}
	for _, tc := range cases {
		for _, impl := range impls {
			b.Run(fmt.Sprintf("%s/%s/%s/impl=%s", family, tc.verdict, label, impl.name), func(b *testing.B) {
				ret, perRun, err := impl.prog.Benchmark(tc.frame, b.N, nil)
				if err != nil {
					b.Fatal(err)
				}
				if Action(ret) != tc.want {
					b.Fatalf("verdict %s, want %s", Action(ret), tc.want)
				}
				b.ReportMetric(float64(perRun.Nanoseconds()), "ns/pkt")
			})
		}
	}
}

// BenchmarkXDPEmpty is the floor: an XDP program that only returns
// XDP_PASS, run the same way.
func BenchmarkXDPEmpty(b *testing.B) {
	bpftest.Require(b)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "tw_xdp_empty", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	_, perRun, err := prog.Benchmark(ether(etIPv4, nil, ipv4(src4OK, dst4, 0, 18)), b.N, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(perRun.Nanoseconds()), "ns/pkt")
}

// BenchmarkReload measures a full blocklist swap of 65,536 IPv4 and 65,536
// IPv6 prefixes (building both tables in Go, one batch update each, and
// the synchronize_rcu of each swap).
func BenchmarkReload(b *testing.B) {
	f, _ := loadInstance(b, nil)
	r := rand.New(rand.NewPCG(1, 2))
	var lists [2][]netip.Prefix
	for i := range lists {
		lists[i] = append(randomPrefixes(r, 65536, false, mixed4, src4OK), randomPrefixes(r, 65536, true, mixed6, src6OK)...)
	}
	for i := 0; b.Loop(); i++ {
		if err := f.Reload(lists[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
