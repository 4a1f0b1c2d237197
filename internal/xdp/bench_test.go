package xdp

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// mixedPrefixes returns n distinct random prefixes of mixed lengths (a
// blocklist's usual shape: many /24 and /32, fewer short prefixes), none
// of which contains avoid. The last one is a host prefix (/32, /128): the
// benchmarks' drop frames come from it, the deepest kind of match.
func mixedPrefixes(r *rand.Rand, n int, v6 bool, avoid netip.Addr) []netip.Prefix {
	lens4 := []int{12, 16, 16, 20, 20, 24, 24, 24, 24, 28, 28, 32, 32, 32, 32, 32}
	lens6 := []int{32, 40, 48, 48, 56, 56, 64, 64, 64, 96, 128, 128, 128}
	seen := map[netip.Prefix]bool{}
	out := make([]netip.Prefix, 0, n)
	for len(out) < n {
		var p netip.Prefix
		last := len(out) == n-1
		if v6 {
			var a [16]byte
			for i := range a {
				a[i] = byte(r.Uint32())
			}
			a[0] = 0x20 | a[0]&0x1f // global unicast, 2000::/3
			bits := lens6[r.IntN(len(lens6))]
			if last {
				bits = 128
			}
			p = netip.PrefixFrom(netip.AddrFrom16(a), bits).Masked()
		} else {
			a := [4]byte{byte(1 + r.IntN(223)), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}
			bits := lens4[r.IntN(len(lens4))]
			if last {
				bits = 32
			}
			p = netip.PrefixFrom(netip.AddrFrom4(a), bits).Masked()
		}
		if seen[p] || p.Contains(avoid) {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

// BenchmarkXDP measures the filter per packet with BPF_PROG_TEST_RUN
// (repeat = b.N): ns/pkt is the kernel's own average run time per frame
// (program only, no syscall); ns/op also contains the syscall, spread
// over the repeats.
func BenchmarkXDP(b *testing.B) {
	bpftest.Require(b)
	for _, family := range []string{"ipv4", "ipv6"} {
		v6 := family == "ipv6"
		for _, n := range []int{1, 10000, 65536} {
			f, inst := loadInstance(b, nil)
			r := rand.New(rand.NewPCG(uint64(n), 7))
			passSrc := src4OK
			if v6 {
				passSrc = src6OK
			}
			list := mixedPrefixes(r, n, v6, passSrc)
			if err := f.Reload(list); err != nil {
				b.Fatal(err)
			}
			dropSrc := list[len(list)-1].Addr()
			frame := func(src netip.Addr) []byte {
				if v6 {
					return ether(etIPv6, nil, ipv6(src, dst6, 18))
				}
				return ether(etIPv4, nil, ipv4(src, dst4, 0, 18))
			}
			for _, tc := range []struct {
				verdict string
				frame   []byte
				want    Action
			}{
				{"pass", frame(passSrc), ActionPass},
				{"drop", frame(dropSrc), ActionDrop},
			} {
				b.Run(fmt.Sprintf("%s/%s/entries=%d", family, tc.verdict, n), func(b *testing.B) {
					ret, perRun, err := inst.prog.Benchmark(tc.frame, b.N, nil)
					if err != nil {
						b.Fatal(err)
					}
					if Action(ret) != tc.want {
						b.Fatalf("verdict %s, want %s", Action(ret), tc.want)
					}
					b.ReportMetric(float64(perRun.Nanoseconds()), "ns/pkt")
				})
			}
			f.Close()
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
// IPv6 prefixes (building both tries, one syscall per entry, and the
// synchronize_rcu of each swap).
func BenchmarkReload(b *testing.B) {
	f, _ := loadInstance(b, nil)
	r := rand.New(rand.NewPCG(1, 2))
	var lists [2][]netip.Prefix
	for i := range lists {
		lists[i] = append(mixedPrefixes(r, 65536, false, src4OK), mixedPrefixes(r, 65536, true, src6OK)...)
	}
	for i := 0; b.Loop(); i++ {
		if err := f.Reload(lists[i%2]); err != nil {
			b.Fatal(err)
		}
	}
}
