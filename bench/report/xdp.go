package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var xdpSizes = []int{1, 10000, 65536}

func xdpSection(d *doc) error {
	g, err := readGobench(d.runID)
	if err != nil {
		return err
	}
	d.p("## 4. XDP filter against netfilter\n\n")
	d.p("### Program time per packet (BPF_PROG_TEST_RUN)\n\n")
	d.p("`go test -bench 'BenchmarkXDP' ./internal/xdp/` in this run: the prefix-table filter (hash) and the LPM-trie filter it replaced (lpm, `bench/xdpnf/lpmfilter`), loaded with the same mixed-length blocklists, and an empty XDP program (the floor) in the same invocation. ns/packet is the kernel's average per frame; median [min-max] over the -count runs.\n\n")
	d.p("| family | verdict | entries | hash ns/pkt | lpm ns/pkt |\n| --- | --- | --- | --- | --- |\n")
	floor := g.get("BenchmarkXDPEmpty", "ns/pkt")
	plot := map[string][][3]float64{}
	var worst []float64
	for _, fam := range []string{"ipv4", "ipv6"} {
		for _, v := range []string{"pass", "drop-long", "drop-short"} {
			for _, n := range xdpSizes {
				name := func(impl string) string { return fmt.Sprintf("BenchmarkXDP/%s/%s/entries=%d/impl=%s", fam, v, n, impl) }
				h, l := g.get(name("hash"), "ns/pkt"), g.get(name("lpm"), "ns/pkt")
				if !h.ok() && !l.ok() {
					continue
				}
				d.p("| %s | %s | %d | %s | %s |\n", fam, v, n, h.f(1), l.f(1))
				for impl, s := range map[string]spread{"hash": h, "lpm": l} {
					if s.ok() && v != "drop-short" {
						k := impl + " " + fam + " " + v
						plot[k] = append(plot[k], [3]float64{float64(n), s.Med, 0})
					}
				}
				if n == 65536 && h.ok() {
					worst = append(worst, g.vals[name("hash")]["ns/pkt"]...)
				}
			}
		}
	}
	d.p("| empty program (floor) | | | %s | |\n\n", floor.f(1))
	w := spreadOf(worst)
	d.target("XDP filter at most 60 ns/packet at 65,536 mixed-length entries, both families, pass and drop (every case and run)",
		fmt.Sprintf("%s ns (all cases and runs; floor %s)", w.f(1), floor.f(1)), atMost(spreadOf([]float64{w.Max}), 60), "4")
	if err := plotXDP(plot, floor.Med); err != nil {
		return err
	}
	d.p("![XDP ns/packet against blocklist size](bench/results/xdp.png)\n\n")
	return vethSection(d)
}

// vethSection is xdpnf's flood over a veth pair: receive CPU per dropped
// packet, with the floor (xdp-drop-all) from the same repeats.
func vethSection(d *doc) error {
	meta, ts, err := d.inputs("xdpnf", "xdp-netfilter.csv")
	if err != nil {
		return err
	}
	t := ts[0]
	hz, _ := strconv.ParseFloat(meta.Params["user_hz"], 64)
	rx := func(r map[string]string) float64 {
		if r["rx_path"] == "inline" {
			return num(r, "sender_cpus_softirq_jiffies") * 1e9 / hz / max(num(r, "dropped"), 1)
		}
		return num(r, "napi_thread_ns") / max(num(r, "dropped"), 1)
	}
	others := func(r map[string]string) float64 {
		return max(num(r, "rx_cpu_busy_jiffies")/hz/num(r, "seconds")-num(r, "napi_thread_ns")/1e9/num(r, "seconds"), 0)
	}
	type key struct {
		path, variant string
		n             int
	}
	by := map[key][]map[string]string{}
	var keys []key
	for _, r := range t.Rows {
		n, _ := strconv.Atoi(r["entries"])
		k := key{r["rx_path"], r["variant"], n}
		if by[k] == nil {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		if a.n != b.n {
			return a.n - b.n
		}
		return strings.Compare(a.variant, b.variant)
	})
	sp := func(rs []map[string]string, f func(map[string]string) float64) spread {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return spreadOf(v)
	}
	d.p("### Receive CPU per dropped packet on a veth pair (bench/xdpnf)\n\n")
	d.p("A flood of 60-byte UDP frames from a blocklisted source (%s) over a veth pair between two namespaces the benchmark makes, %s per variant, %s repeats, variants interleaved; receive path `%s` (napi: GRO and threaded NAPI, the NAPI thread pinned to CPU %s, its exact run time). ",
		meta.Params["src"], meta.Params["duration"], meta.Params["repeats"], meta.Params["rx"], meta.Params["rx_cpu"])
	d.p("`xdp-drop-all` (a native XDP program that drops every frame unread) is the floor, measured in the same repeats; *vs floor* is each repeat's receive ns/packet minus the floor's **in the same repeat** (adjacent runs), never medians of different periods. ")
	d.p("*Others on rx CPU* is what else ran on the receive CPU during the flood (cores): a run with others there costs more whatever the variant.\n\n")
	d.p("| path | entries | variant | receive ns/pkt | vs floor, same repeat | pkts per NAPI run | others on rx CPU, cores | program ns/pkt (bpf stats) | dropped / sent |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, k := range keys {
		rs := by[k]
		floorRows := by[key{k.path, "xdp-drop-all", 1}]
		vsFloor := "-"
		if k.variant != "xdp-drop-all" && len(floorRows) > 0 {
			var diffs []float64
			for _, r := range rs {
				for _, f := range floorRows {
					if f["repeat"] == r["repeat"] {
						diffs = append(diffs, rx(r)-rx(f))
					}
				}
			}
			vsFloor = spreadOf(diffs).f(0)
		}
		prog := "-"
		if s := sp(rs, func(r map[string]string) float64 { return num(r, "prog_ns") / num(r, "prog_runs") }); s.ok() && s.Med > 0 {
			prog = s.f(0)
		}
		d.p("| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", k.path, k.n, k.variant, sp(rs, rx).f(0), vsFloor,
			sp(rs, func(r map[string]string) float64 { return num(r, "dropped") / max(num(r, "napi_thread_runs"), 1) }).f(1),
			sp(rs, others).f(2), prog, sp(rs, func(r map[string]string) float64 { return num(r, "dropped") / max(num(r, "sent"), 1) }).f(3))
	}
	d.p("\nOn veth every variant, XDP included, pays for an skb the sender already built; XDP saves only the stack it skips. The receive cost per packet falls as packets per NAPI run rise (wake-ups are amortized), so compare variants at similar batch sizes or by program time. Raw: `bench/results/xdp-netfilter.csv`.\n\n")
	return nil
}
