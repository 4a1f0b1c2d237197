package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// summary is the median over repeats of each of one variant's
// measurements (each column's median on its own, so a row need not be one
// repeat's numbers).
type summary struct {
	Variant                         string
	N                               int
	P50, P99, P999, TTFT50          float64
	ServerCPU, CollectorCPU, BPFSec float64 // cores: CPU seconds per second of window
	ServerCPUSec, CollectorCPUSec   float64 // CPU seconds in the window
	BPFRunSec                       float64 // BPF run time in the window, seconds
	Completed, Spans, Points        float64 // per run: streams completed, spans and metric points the collector exported
	ServerRSS, ServerHWM, CollRSS   float64 // MiB
	CollHWM, ChunksPerSec           float64
	Errors                          int
}

func summarize(rows []row, variant string) summary {
	s := summary{Variant: variant}
	var p50, p99, p999, ttft, scpu, ccpu, ssec, csec, bpf, bsec, done, spans, points, srss, shwm, crss, chwm, cps []float64
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
		scpu = append(scpu, r.cores(r.ServerCPU))
		ccpu = append(ccpu, r.cores(r.CollectorCPU))
		ssec = append(ssec, r.ServerCPU)
		csec = append(csec, r.CollectorCPU)
		bpf = append(bpf, r.cores(float64(r.BPFRunNs)/1e9))
		bsec = append(bsec, float64(r.BPFRunNs)/1e9)
		done = append(done, float64(r.Load.Completed))
		spans = append(spans, float64(r.Exported.Spans))
		points = append(points, float64(r.Exported.Points))
		srss = append(srss, mib(r.ServerMem.RSS))
		shwm = append(shwm, mib(r.ServerMem.HWM))
		crss = append(crss, mib(r.CollectorMem.RSS))
		chwm = append(chwm, mib(r.CollectorMem.HWM))
		cps = append(cps, float64(r.Load.Chunks)/r.Window)
	}
	m := benchutil.Median
	s.P50, s.P99, s.P999, s.TTFT50 = m(p50), m(p99), m(p999), m(ttft)
	s.ServerCPU, s.CollectorCPU, s.BPFSec = m(scpu), m(ccpu), m(bpf)
	s.ServerCPUSec, s.CollectorCPUSec, s.BPFRunSec = m(ssec), m(csec), m(bsec)
	s.Completed, s.Spans, s.Points = m(done), m(spans), m(points)
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
	recs = nil
	for _, r := range rows {
		names := make([]string, 0, len(r.BPFByProg))
		for n := range r.BPFByProg {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			pr := r.BPFByProg[n]
			recs = append(recs, []string{strconv.Itoa(r.Repeat), r.Variant, strconv.Itoa(r.Streams), n, u(pr.Ns), u(pr.Cnt), strconv.Itoa(r.Load.Chunks)})
		}
	}
	if err := writeCSV(filepath.Join(*outDir, "overhead"+suffix+"-bpf.csv"),
		[]string{"repeat", "variant", "streams", "program", "run_ns", "run_cnt", "chunks"}, recs); err != nil {
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
		"each number is the median over the repeats. Server, load generator and collector are separate processes sharing this host's %d CPUs "+
		"(not pinned, not isolated from other work on the host).\n\n",
		nStreams, *interval, float64(time.Second)/float64(*interval), float64(nStreams)*float64(time.Second)/float64(*interval), *chunks,
		*duration, *warmup, *repeats, runtime.NumCPU())
	writeVariants(b)
	w("What is measured:\n\n")
	w("- *Chunk delivery latency*: the time the client read the event minus the time the server scheduled it (both this host's wall clock). " +
		"It includes the server's timer wake-up delay, its write, the loopback transfer and the client's read. " +
		"The schedule is fixed from the stream's start, so a server that falls behind shows as growing latency. Only events read inside the window count.\n")
	w("- *Client TTFT*: request written to first event read, including the server's 20 ms think time.\n")
	w("- *CPU*: utime+stime of the process (all threads) from /proc/<pid>/stat, difference over the window (10 ms resolution), " +
		"as CPU seconds and as cores (seconds per second of window). Kernel work in softirq (loopback receive) is charged to whichever process was running at the time.\n")
	w("- *RSS*: VmRSS at the end of the window; *HWM*: VmHWM, the peak since the process started.\n")
	w("- *BPF run time*: the summed run_time_ns of the BPF programs the collector holds (kernel bpf stats), over the window. " +
		"It includes the handshake programs, which run for every TCP socket on the host, not only the benchmark's. " +
		"It is not extra CPU: a program runs in the context that hit its hook (the server's sends, softirq receive), so it is already inside those CPU numbers.\n\n")
	sums := map[string]summary{}
	w("| variant | chunks/s delivered | latency p50 ms | p99 ms | p99.9 ms | client TTFT p50 ms | server CPU s (cores) | collector CPU s (cores) | BPF run time s (cores) | server RSS / HWM MiB | collector RSS / HWM MiB | errors |\n")
	w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, v := range variants {
		s := summarize(rows, v)
		sums[v] = s
		w("| %s | %.0f | %.3f | %.3f | %.3f | %.2f | %.2f (%.3f) | %.2f (%.3f) | %.4f (%.5f) | %.1f / %.1f | %.1f / %.1f | %d |\n",
			v, s.ChunksPerSec, s.P50, s.P99, s.P999, s.TTFT50, s.ServerCPUSec, s.ServerCPU, s.CollectorCPUSec, s.CollectorCPU,
			s.BPFRunSec, s.BPFSec, s.ServerRSS, s.ServerHWM, s.CollRSS, s.CollHWM, s.Errors)
	}
	bpfByProgram(b, rows)
	w("\nWhat each collector's debug exporter logged over the whole run (warm-up and the streams finishing after the window included; median per run), " +
		"against the streams the load generator completed in that run:\n\n| variant | streams completed | spans exported | metric data points exported |\n| --- | --- | --- | --- |\n")
	for _, v := range variants {
		if s := sums[v]; v != "baseline" && s.N > 0 {
			w("| %s | %.0f | %.0f | %.0f |\n", v, s.Completed, s.Spans, s.Points)
		}
	}
	w("\nRaw rows (every repeat): `bench/results/overhead%s.csv`; BPF run time by program: `bench/results/overhead%s-bpf.csv`; latency histograms: `bench/results/overhead%s-latency-hist.csv`.\n\n", suffix, suffix, suffix)
	w("![chunk delivery latency, %d streams](bench/results/latency%s.png)\n\n", nStreams, suffix)
	base, okB := sums["baseline"]
	tw, okT := sums["tokenwire"]
	ic, okI := sums["interceptor"]
	if okB && (okT || okI) {
		w("Against the baseline (ratios of the medians; added CPU = server + collector - baseline server, in cores):\n\n")
		w("| variant | latency p50 | p99 | p99.9 | server CPU | server RSS | added CPU (cores) |\n| --- | --- | --- | --- | --- | --- | --- |\n")
		for _, s := range []summary{tw, ic} {
			if s.N == 0 {
				continue
			}
			w("| %s | %s | %s | %s | %s | %s | %.3f |\n", s.Variant, pct(s.P50, base.P50), pct(s.P99, base.P99), pct(s.P999, base.P999),
				pct(s.ServerCPU, base.ServerCPU), pct(s.ServerRSS, base.ServerRSS), s.ServerCPU+s.CollectorCPU-base.ServerCPU)
		}
		w("\n")
	}
	if okB && okT {
		w("Against the targets (tokenwire vs baseline):\n\n| target | measured | verdict |\n| --- | --- | --- |\n")
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
			cmps := []cmp{
				{"latency p50", tw.P50, ic.P50}, {"latency p99", tw.P99, ic.P99}, {"latency p99.9", tw.P999, ic.P999},
				{"server CPU", tw.ServerCPU, ic.ServerCPU}, {"collector CPU", tw.CollectorCPU, ic.CollectorCPU},
				{"server RSS", tw.ServerRSS, ic.ServerRSS}, {"collector RSS", tw.CollRSS, ic.CollRSS},
			}
			var names, lost []string
			for _, c := range cmps {
				names = append(names, c.name)
				if c.t > c.i {
					lost = append(lost, fmt.Sprintf("%s (%.3f vs %.3f)", c.name, c.t, c.i))
				}
			}
			w("| lower than the interceptor on every row (%s; BPF run time is not compared, being inside server CPU) | %d of %d rows lower | %s |\n",
				strings.Join(names, ", "), len(cmps)-len(lost), len(cmps), verdict(len(lost) == 0, "tokenwire is higher on "+strings.Join(lost, ", ")))
		}
		w("\n")
	}
	return tw, okT
}

// bpfByProgram splits the tokenwire variant's BPF run time by program,
// per delivered chunk (medians over repeats): which of it runs in the
// server's write path, and which on the client's side of loopback.
func bpfByProgram(b *strings.Builder, rows []row) {
	per := map[string][][2]float64{} // program -> per repeat: runs per chunk, ns per chunk
	for _, r := range rows {
		if r.Variant != "tokenwire" || r.Load.Chunks == 0 {
			continue
		}
		for name, pr := range r.BPFByProg {
			c := float64(r.Load.Chunks)
			per[name] = append(per[name], [2]float64{float64(pr.Cnt) / c, float64(pr.Ns) / c})
		}
	}
	if len(per) == 0 {
		return
	}
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(b, "\ntokenwire's BPF run time by program, per delivered chunk (medians over repeats; bpf stats):\n\n"+
		"| program | hook, and whose context it runs in on loopback | runs per chunk | ns per run | ns per chunk |\n| --- | --- | --- | --- | --- |\n")
	for _, n := range names {
		var runs, ns []float64
		for _, v := range per[n] {
			runs, ns = append(runs, v[0]), append(ns, v[1])
		}
		r, c := benchutil.Median(runs), benchutil.Median(ns)
		perRun := 0.0
		if r > 0 {
			perRun = c / r
		}
		fmt.Fprintf(b, "| %s | %s | %.2f | %.0f | %.0f |\n", n, progRole[n], r, perRun, c)
	}
}

// progRole says where each of tokenwire's programs runs during the bench.
var progRole = map[string]string{
	"tw_st_sent_btf":  "sock_send_length: every socket send on the host; the server's chunk writes do the work",
	"tw_st_ready_btf": "sk_data_ready: data arriving on any socket; per chunk the load generator's socket, in the server's send path (loopback softirq)",
	"tw_st_recv_btf":  "sock_recv_length: every socket read on the host; per chunk the load generator's reads",
	"tw_st_state_btf": "inet_sock_set_state: TCP state changes (per stream)",
	"tw_hs_btf":       "inet_sock_set_state: TCP state changes, handshake probe (per connection)",
}

// writeVariants says what each variant runs and exports, with the
// collector pipelines read from the config file the collectors ran.
func writeVariants(b *strings.Builder) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	pipes, err := configPipelines(*baseConfig)
	if err != nil {
		pipes = fmt.Sprintf("(pipelines of `%s` not readable: %v)", *baseConfig, err)
	}
	w("Variants:\n\n")
	w("- **baseline**: the server alone, no observer.\n")
	w("- **tokenwire**: the collector runs `%s` (%s) with its listening ports moved and stream tracking on the server's port. "+
		"It exports stream metrics and one span per stream, and, as in the default pipeline, TCP handshake metrics for every port.\n", filepath.Base(*baseConfig), pipes)
	w("- **interceptor**: the server instrumented in-process with the OpenTelemetry Go SDK: per chunk one histogram record "+
		"(TTFT for the first chunk, the interval after it) and two counter adds (chunks, bytes); per stream a duration record and one SERVER span "+
		"with tokenwire's span attributes and a `first_chunk` event. Metrics (same names, attributes and bucket bounds as tokenwire's) are exported every 10 s "+
		"with otlpmetricgrpc; spans go through the SDK's batch span processor (defaults) to otlptracegrpc. "+
		"Both go to the same collector binary running the same `%s` "+
		"with an otlp receiver in place of tokenwire; that collector's CPU and RSS are the interceptor's collector columns.\n\n", filepath.Base(*baseConfig))
}

// configPipelines summarizes a collector config's pipelines, e.g.
// "metrics: tokenwire -> memory_limiter, batch -> prometheus, debug".
func configPipelines(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var cfg struct {
		Service struct {
			Pipelines map[string]struct {
				Receivers, Processors, Exporters []string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return "", err
	}
	var names []string
	for n := range cfg.Service.Pipelines {
		names = append(names, n)
	}
	slices.Sort(names)
	var parts []string
	for _, n := range names {
		p := cfg.Service.Pipelines[n]
		stages := []string{strings.Join(p.Receivers, ", ")}
		if len(p.Processors) > 0 {
			stages = append(stages, strings.Join(p.Processors, ", "))
		}
		stages = append(stages, strings.Join(p.Exporters, ", "))
		parts = append(parts, n+": "+strings.Join(stages, " -> "))
	}
	return strings.Join(parts, "; "), nil
}

func sweepAndMemory(b *strings.Builder, sweep []row, mem *memResult, tw summary, okT bool) {
	w := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	if len(sweep) > 0 {
		w("### Saturation sweep (one run per point, %v window)\n\n", *sweepDur)
		w("| streams | variant | chunks/s expected | delivered | latency p50 ms | p99 ms | server CPU (cores) | collector CPU (cores) | load generator CPU (cores) | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, r := range sweep {
			exp := float64(r.Streams) * float64(time.Second) / float64(*interval)
			w("| %d | %s | %.0f | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %d |\n", r.Streams, r.Variant, exp, float64(r.Load.Chunks)/r.Window,
				at(r.Load.LatencyMs, 0), at(r.Load.LatencyMs, 2), r.cores(r.ServerCPU), r.cores(r.CollectorCPU), r.cores(r.LoadCPU), r.Load.Errors)
		}
		w("\nRaw: `bench/results/overhead-sweep.csv`.\n\n")
	}
	if mem != nil {
		w("## 6. Memory\n\n")
		w("| collector (tokenwire, default pipeline) | RSS MiB | HWM MiB |\n| --- | --- | --- |\n")
		w("| idle (server running, no clients), 12 s after the server started | %.1f | %.1f |\n", mib(mem.Idle.RSS), mib(mem.Idle.HWM))
		if okT {
			w("| at the streaming load above (%d streams, median) | %.1f | %.1f |\n", *streams, tw.CollRSS, tw.CollHWM)
		}
		w("| %d open SSE streams (%s), 12 s after they opened | %.1f | %.1f |\n", *idleConns, mem.Connected, mib(mem.Streaming10k.RSS), mib(mem.Streaming10k.HWM))
		w("\nCollector CPU, for scale: %.3f cores idle (over 10 s with no clients), %.3f cores with the %d streams open and quiet (a keep-alive comment per stream per second).\n", mem.IdleCPU, mem.CPU10k, *idleConns)
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
