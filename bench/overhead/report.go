package main

import (
	"fmt"
	"time"

	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// summary is the median over repeats of one variant's measurements.
type summary struct {
	Variant                         string
	N                               int
	P50, P99, P999, TTFT50          float64
	ServerCPU, CollectorCPU, BPFSec float64
	ServerRSS, ServerHWM, CollRSS   float64 // MiB
	CollHWM, ChunksPerSec           float64
	Errors                          int
}

func summarize(rows []row, variant string) summary {
	s := summary{Variant: variant}
	var p50, p99, p999, ttft, scpu, ccpu, bpf, srss, shwm, crss, chwm, cps []float64
	for _, r := range rows {
		if r.Variant != variant {
			continue
		}
		s.N++
		s.Errors += r.Load.Errors
		p50 = append(p50, at(r.Load.LatencyMs, 0))
		p99 = append(p99, at(r.Load.LatencyMs, 2))
		p999 = append(p999, at(r.Load.LatencyMs, 3))
		ttft = append(ttft, at(r.Load.TTFTMs, 0))
		scpu = append(scpu, r.ServerCPU/r.Window)
		ccpu = append(ccpu, r.CollectorCPU/r.Window)
		bpf = append(bpf, float64(r.BPFRunNs)/1e9/r.Window)
		srss = append(srss, mib(r.ServerMem.RSS))
		shwm = append(shwm, mib(r.ServerMem.HWM))
		crss = append(crss, mib(r.CollectorMem.RSS))
		chwm = append(chwm, mib(r.CollectorMem.HWM))
		cps = append(cps, float64(r.Load.Chunks)/r.Window)
	}
	m := benchutil.Median
	s.P50, s.P99, s.P999, s.TTFT50 = m(p50), m(p99), m(p999), m(ttft)
	s.ServerCPU, s.CollectorCPU, s.BPFSec = m(scpu), m(ccpu), m(bpf)
	s.ServerRSS, s.ServerHWM, s.CollRSS, s.CollHWM, s.ChunksPerSec = m(srss), m(shwm), m(crss), m(chwm), m(cps)
	return s
}

func pct(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.1f%%", (a/b-1)*100)
}

// writeComparison writes one interleaved comparison's CSV, histogram CSV
// and plot; suffix "" for the main one, "-<streams>" for -also-streams.
func writeComparison(rows []row, variants []string, suffix string) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, rowCSV(r))
	}
	if err := writeCSV(filepath.Join(*outDir, "overhead"+suffix+".csv"), rowHeader, recs); err != nil {
		return err
	}
	bounds := histBounds()
	hists := map[string][]uint64{}
	for _, r := range rows {
		h := hists[r.Variant]
		if h == nil {
			h = make([]uint64, len(bounds)+1)
			hists[r.Variant] = h
		}
		for i, c := range r.Load.Hist {
			if i < len(h) {
				h[i] += c
			}
		}
	}
	recs = nil
	for _, v := range variants {
		for i, c := range hists[v] {
			ub := "+Inf"
			if i < len(bounds) {
				ub = f3(bounds[i])
			}
			recs = append(recs, []string{v, ub, u(c)})
		}
	}
	if err := writeCSV(filepath.Join(*outDir, "overhead"+suffix+"-latency-hist.csv"), []string{"variant", "le_us", "count"}, recs); err != nil {
		return err
	}
	return plotCDF(filepath.Join(*outDir, "latency"+suffix+".png"), variants, hists, bounds)
}

func writeResults(rows, rows2, sweep []row, mem *memResult, variants []string) error {
	if err := writeComparison(rows, variants, ""); err != nil {
		return err
	}
	if len(rows2) > 0 {
		if err := writeComparison(rows2, variants, fmt.Sprintf("-%d", *alsoStreams)); err != nil {
			return err
		}
	}
	var recs [][]string
	for _, r := range sweep {
		recs = append(recs, rowCSV(r))
	}
	if len(sweep) > 0 {
		if err := writeCSV(filepath.Join(*outDir, "overhead-sweep.csv"), rowHeader, recs); err != nil {
			return err
		}
	}
	if mem != nil {
		recs = [][]string{
			{"collector_idle", u(mem.Idle.RSS), u(mem.Idle.HWM)},
			{fmt.Sprintf("collector_%d_streams", *idleConns), u(mem.Streaming10k.RSS), u(mem.Streaming10k.HWM)},
			{fmt.Sprintf("server_%d_streams", *idleConns), u(mem.ServerAt10k.RSS), u(mem.ServerAt10k.HWM)},
		}
		if err := writeCSV(filepath.Join(*outDir, "memory.csv"), []string{"what", "rss_bytes", "hwm_bytes"}, recs); err != nil {
			return err
		}
		recs = nil
		for _, m := range mem.Maps10k {
			recs = append(recs, []string{strconv.Itoa(int(m.ID)), m.Name, m.Type, strconv.Itoa(int(m.MaxEntries)), u(m.Memlock)})
		}
		if err := writeCSV(filepath.Join(*outDir, "bpf-maps.csv"), []string{"id", "name", "type", "max_entries", "memlock_bytes"}, recs); err != nil {
			return err
		}
	}
	md := markdown(rows, rows2, sweep, mem, variants)
	fmt.Print(md)
	return os.WriteFile(filepath.Join(*outDir, "overhead.md"), []byte(md), 0o644)
}

func verdict(ok bool, miss string) string {
	if ok {
		return "met"
	}
	return "**missed**: " + miss
}

func markdown(rows, rows2, sweep []row, mem *memResult, variants []string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## 1. Streaming overhead\n\n")
	tw, okT := comparison(&b, rows, variants, *streams, "")
	if len(rows2) > 0 {
		w("### The same comparison below saturation: %d streams\n\n", *alsoStreams)
		comparison(&b, rows2, variants, *alsoStreams, fmt.Sprintf("-%d", *alsoStreams))
	}
	sweepAndMemory(&b, sweep, mem, tw, okT)
	return b.String()
}

// comparison writes one interleaved comparison's tables and returns
// tokenwire's summary.
func comparison(b *strings.Builder, rows []row, variants []string, nStreams int, suffix string) (summary, bool) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	w("%d concurrent SSE streams, one event every %v (%.0f chunks/s per stream, %.0f chunks/s in all), streams of %d events "+
		"each on a new connection; %v measured per variant after %v of warm-up; %d repeats, variants interleaved (order rotated each repeat); "+
		"medians over repeats. Server, load generator and collector are separate processes on the same 2 cores.\n\n",
		nStreams, *interval, float64(time.Second)/float64(*interval), float64(nStreams)*float64(time.Second)/float64(*interval), *chunks,
		*duration, *warmup, *repeats)
	w("Chunk delivery latency = time the client read the event - time the server scheduled it (same clock). ")
	w("CPU is utime+stime from /proc/<pid>/stat over the window, as a fraction of one core. BPF time is the collector's programs' run_time_ns (kernel bpf stats), per second of window; it is already inside the server's (and softirq) CPU, not extra.\n\n")
	sums := map[string]summary{}
	w("| variant | chunks/s delivered | latency p50 ms | p99 ms | p99.9 ms | client TTFT p50 ms | server CPU (cores) | collector CPU (cores) | BPF run time (cores) | server RSS / HWM MiB | collector RSS / HWM MiB | errors |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, v := range variants {
		s := summarize(rows, v)
		sums[v] = s
		w("| %s | %.0f | %.3f | %.3f | %.3f | %.2f | %.3f | %.3f | %.4f | %.1f / %.1f | %.1f / %.1f | %d |\n",
			v, s.ChunksPerSec, s.P50, s.P99, s.P999, s.TTFT50, s.ServerCPU, s.CollectorCPU, s.BPFSec, s.ServerRSS, s.ServerHWM, s.CollRSS, s.CollHWM, s.Errors)
	}
	w("\nRaw rows: `bench/results/overhead%s.csv`; latency histograms: `bench/results/overhead%s-latency-hist.csv`.\n\n", suffix, suffix)
	w("![chunk delivery latency, %d streams](bench/results/latency%s.png)\n\n", nStreams, suffix)
	base, okB := sums["baseline"]
	tw, okT := sums["tokenwire"]
	ic, okI := sums["interceptor"]
	if okB && okT {
		w("### Against the targets (tokenwire vs baseline)\n\n| target | measured | verdict |\n| --- | --- | --- |\n")
		cpuAdd := (tw.ServerCPU/base.ServerCPU - 1) * 100
		w("| server CPU +1%% at most | %s (%.3f vs %.3f cores) | %s |\n", pct(tw.ServerCPU, base.ServerCPU), tw.ServerCPU, base.ServerCPU,
			verdict(cpuAdd <= 1, fmt.Sprintf("by %.1f points", cpuAdd-1)))
		p99Add := (tw.P99/base.P99 - 1) * 100
		w("| p99 chunk latency +2%% at most | %s (%.3f vs %.3f ms) | %s |\n", pct(tw.P99, base.P99), tw.P99, base.P99,
			verdict(p99Add <= 2, fmt.Sprintf("by %.1f points", p99Add-2)))
		w("| collector at most 5%% of one core | %.1f%% | %s |\n", tw.CollectorCPU*100,
			verdict(tw.CollectorCPU <= 0.05, fmt.Sprintf("by %.1f points", tw.CollectorCPU*100-5)))
		if okI {
			type cmp struct {
				name string
				t, i float64
			}
			var lost []string
			for _, c := range []cmp{
				{"p50", tw.P50, ic.P50}, {"p99", tw.P99, ic.P99},
				{"server CPU", tw.ServerCPU, ic.ServerCPU}, {"collector CPU", tw.CollectorCPU, ic.CollectorCPU},
				{"server+collector CPU", tw.ServerCPU + tw.CollectorCPU, ic.ServerCPU + ic.CollectorCPU},
				{"server RSS", tw.ServerRSS, ic.ServerRSS}, {"collector RSS", tw.CollRSS, ic.CollRSS},
			} {
				if c.t > c.i {
					lost = append(lost, fmt.Sprintf("%s (%.3f vs %.3f)", c.name, c.t, c.i))
				}
			}
			w("| beats the interceptor on every row | interceptor vs baseline: p99 %s, server CPU %s, server RSS %s | %s |\n",
				pct(ic.P99, base.P99), pct(ic.ServerCPU, base.ServerCPU), pct(ic.ServerRSS, base.ServerRSS),
				verdict(len(lost) == 0, "tokenwire is worse on "+strings.Join(lost, ", ")))
		}
		w("\n")
	}
	return tw, okT
}

func sweepAndMemory(b *strings.Builder, sweep []row, mem *memResult, tw summary, okT bool) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	if len(sweep) > 0 {
		w("### Saturation sweep (one run per point, %v window)\n\n", *sweepDur)
		w("| streams | variant | chunks/s expected | delivered | latency p50 ms | p99 ms | server CPU (cores) | collector CPU (cores) | load generator CPU (cores) | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, r := range sweep {
			exp := float64(r.Streams) * float64(time.Second) / float64(*interval)
			w("| %d | %s | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %d |\n", r.Streams, r.Variant, exp, float64(r.Load.Chunks)/r.Window,
				at(r.Load.LatencyMs, 0), at(r.Load.LatencyMs, 2), r.ServerCPU/r.Window, r.CollectorCPU/r.Window, r.LoadCPU/r.Window, r.Load.Errors)
		}
		w("\nRaw: `bench/results/overhead-sweep.csv`.\n\n")
	}
	if mem != nil {
		w("## 6. Memory\n\n")
		w("| collector (tokenwire, default pipeline) | RSS MiB | HWM MiB |\n| --- | --- | --- |\n")
		w("| idle, 12 s after start | %.1f | %.1f |\n", mib(mem.Idle.RSS), mib(mem.Idle.HWM))
		if okT {
			w("| at the streaming load above (%d streams, median) | %.1f | %.1f |\n", *streams, tw.CollRSS, tw.CollHWM)
		}
		w("| %d open SSE streams (%s), 12 s after they opened | %.1f | %.1f |\n", *idleConns, mem.Connected, mib(mem.Streaming10k.RSS), mib(mem.Streaming10k.HWM))
		w("\nCollector CPU, for scale: %.3f cores idle (10 s with nothing to observe), %.3f cores with the %d streams open and quiet (a keep-alive comment per stream per second).\n", mem.IdleCPU, mem.CPU10k, *idleConns)
		w("\nTarget under 100 MiB RSS at %d streams: %s. (The SSE server holding them: %.1f MiB RSS.)\n\n",
			*idleConns, verdict(mib(mem.Streaming10k.RSS) < 100, fmt.Sprintf("by %.1f MiB", mib(mem.Streaming10k.RSS)-100)), mib(mem.ServerAt10k.RSS))
		w("BPF maps held by the collector (memlock from /proc/<pid>/fdinfo, at %d streams):\n\n| map | type | max entries | memlock KiB |\n| --- | --- | --- | --- |\n", *idleConns)
		var total uint64
		for _, m := range mem.Maps10k {
			w("| %s | %s | %d | %.1f |\n", m.Name, m.Type, m.MaxEntries, float64(m.Memlock)/1024)
			total += m.Memlock
		}
		w("| **total** | | | **%.1f** (%.2f MiB) |\n\nRaw: `bench/results/memory.csv`, `bench/results/bpf-maps.csv`.\n\n", float64(total)/1024, mib(total))
	}
}
