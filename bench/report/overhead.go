package main

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// orow is one variant in one repeat of overhead.csv.
type orow map[string]string

func (r orow) cores(k string) float64 { return num(r, k) / num(r, "cpu_window_s") }

// serverCPURatio is a variant's server CPU against another's in the same
// repeat, less 1: +0.05 is 5% more.
func serverCPURatio(a, b orow) float64 { return a.cores("server_cpu_s")/b.cores("server_cpu_s") - 1 }

// p99Of is a repeat's p99 chunk latency, in ms.
func p99Of(r orow) float64 { return num(r, "latency_p99_ms") }

// perStatsChunk is a BPF counter of the stats window per chunk delivered
// in it: NaN (n/a) for a variant that measured no BPF there, or whose
// window delivered nothing.
func perStatsChunk(r, row map[string]string, k string) float64 {
	if num(row, "stats_window_s") == 0 || num(r, "stats_chunks") == 0 {
		return math.NaN()
	}
	return num(r, k) / num(r, "stats_chunks")
}

func overheadSection(d *doc) error {
	meta, ts, err := d.inputs("overhead", "overhead.csv", "overhead-bpf.csv", "overhead-hist.csv")
	if err != nil {
		return err
	}
	t, bt, ht := ts[0], ts[1], ts[2]
	by := map[string][]orow{}
	var variants []string
	for _, r := range t.Rows {
		if by[r["variant"]] == nil {
			variants = append(variants, r["variant"])
		}
		by[r["variant"]] = append(by[r["variant"]], r)
	}
	slices.Sort(variants)
	sp := func(v string, f func(orow) float64) spread {
		var x []float64
		for _, r := range by[v] {
			x = append(x, f(r))
		}
		return spreadOf(x)
	}
	// paired: f(variant's row, baseline's row of the same repeat).
	paired := func(v, base string, f func(a, b orow) float64) spread {
		var x []float64
		for _, a := range by[v] {
			for _, b := range by[base] {
				if a["repeat"] == b["repeat"] {
					x = append(x, f(a, b))
				}
			}
		}
		return spreadOf(x)
	}
	d.p("## 2. Streaming overhead: Go and Python servers (bench/overhead)\n\n")
	d.p("%s concurrent streams per variant; every variant's load starts %s after its server (a tokenwire variant's also once the collector has probed the new server, whose one-time cost is in its own table below), then %s of warm-up, a %s stats window and %s measured: the same timeline for every variant; %s repeats, every variant in every repeat, order rotated. ",
		meta.Params["streams"], meta.Params["settle"], meta.Params["warmup"], meta.Params["stats_window"], meta.Params["window"], meta.Params["repeats"])
	d.p("**Go**: the bench's net/http SSE server, one event every %s, %s events per stream, one connection per stream; variants baseline (alone), tokenwire (the collector with `%s`), interceptor (the OpenTelemetry Go SDK in the server: a histogram record and two counter adds per chunk, a span per stream, OTLP/gRPC to the same collector binary with an otlp receiver). ",
		meta.Params["go_interval"], meta.Params["go_chunks"], meta.Params["config"])
	d.p("**Python**: teststack's uvicorn + starlette server (the stack vLLM serves with), one event every %s, %s events per stream, clients sending chat completions as openai-python does on keep-alive connections; variants baseline and tokenwire. **Both stacks** also run a bystander variant: the same collector with stream tracking on another port, so that the server's streams are not observed (the stream programs run on the server's writes and reads and exit at the port test; handshake tracking, on for every port by default, still times its connections): what tokenwire costs a host's other processes, and a control for the comparison, since the bystander differs from its baseline by that cost and the machine's noise alone. They also run an idle variant: the collector binary with an otlp receiver in place of tokenwire, which nothing sends to (a collector process beside the server and no BPF program), so that the bystander's difference from it is what the attached programs cost. ",
		meta.Params["py_interval"], meta.Params["py_chunks"])
	d.p("Chunk latency: Go, arrival minus the time the server scheduled the event; Python, arrival minus the time the app handed the event to uvicorn (the server's own CLOCK_MONOTONIC report). CPU: utime+stime from /proc over the window, in cores. BPF: the collector's programs' run time (bpf stats), which runs inside the server's and the clients' CPU, not beside it; measured in the stats window just before the CPU window (same load; bpf stats are on only there, and only in tokenwire and bystander variants), because they add two clock reads to every program run, a cost users do not pay: they are off while CPU and latency are measured.\n\n")
	d.p("| variant | chunks/s | latency p50 ms | p99 ms | p99.9 ms | server CPU, cores | collector CPU, cores | BPF ns per chunk | server RSS MiB | other processes, cores | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, v := range variants {
		if isTwin(v) {
			continue // at twice the load: twinTable
		}
		d.p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", v,
			sp(v, func(r orow) float64 { return num(r, "chunks") / num(r, "window_s") }).f(0),
			sp(v, func(r orow) float64 { return num(r, "latency_p50_ms") }).f(3),
			sp(v, p99Of).f(3),
			sp(v, func(r orow) float64 { return num(r, "latency_p999_ms") }).f(3),
			sp(v, func(r orow) float64 { return r.cores("server_cpu_s") }).f(3),
			sp(v, func(r orow) float64 { return r.cores("collector_cpu_s") }).f(3),
			sp(v, func(r orow) float64 { return perStatsChunk(r, r, "bpf_run_ns") }).f(0),
			sp(v, func(r orow) float64 { return num(r, "server_rss_bytes") / (1 << 20) }).f(1),
			sp(v, func(r orow) float64 { return num(r, "others_cores") }).f(2),
			sp(v, func(r orow) float64 { return num(r, "errors") }).f(0))
	}
	probeTable(d, variants, by, sp)
	twin, unwatched, excess, haveTwins := twinTable(d, by, sp)
	d.p("\nAgainst each stack's own baseline, paired by repeat (the two ran minutes apart at most):\n\n")
	d.p("| variant | server CPU vs baseline | server CPU per chunk vs baseline | baseline's own repeats: server CPU, max/min - 1 | p99 | baseline's p99 range, ms |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, v := range variants {
		stack, obs, _ := strings.Cut(v, "/")
		base := stack + "/baseline"
		if obs == "baseline" || isTwin(v) || by[base] == nil {
			continue
		}
		cpu := paired(v, base, serverCPURatio)
		cpc := paired(v, base, func(a, b orow) float64 {
			return (num(a, "server_cpu_s")/num(a, "chunks"))/(num(b, "server_cpu_s")/num(b, "chunks")) - 1
		})
		bcpu := sp(base, func(r orow) float64 { return r.cores("server_cpu_s") })
		p99 := sp(v, p99Of)
		bp99 := sp(base, p99Of)
		d.p("| %s | %s | %s | %+.1f%% | %s ms | %s |\n", v, cpu.pct(), cpc.pct(), (bcpu.Max/bcpu.Min-1)*100, p99.f(3), bp99.f(3))
		switch obs {
		case "idle":
			d.target(fmt.Sprintf("%s server beside an idle collector (no BPF): CPU vs its baseline, paired by repeat (computed, no target)", stack),
				fmt.Sprintf("%s; p99 %s ms", cpu.pct(), p99.f(3)), "computed, no target", "2")
		case "bystander":
			bpf := sp(v, func(r orow) float64 { return perStatsChunk(r, r, "bpf_run_ns") })
			got := fmt.Sprintf("%s; the collector's programs, the stream programs exiting at the port test, %s ns per chunk", cpu.pct(), bpf.f(0))
			if idle := stack + "/idle"; by[idle] != nil {
				got += fmt.Sprintf("; against the idle collector, paired by repeat: CPU %s, p99 %s ms against %s ms", paired(v, idle, serverCPURatio).pct(),
					p99.f(3), sp(idle, p99Of).f(3))
			}
			d.target(fmt.Sprintf("%s server as a bystander (stream tracking on another port): CPU vs its baseline, paired by repeat (computed, no target)", stack), got, "computed, no target", "2")
		}
		if obs != "tokenwire" {
			continue
		}
		limit := 0.03
		if stack == "python" {
			limit = 0.01
		}
		note := writeShareNote(d, bt, v, base, by, limit)
		if stack == "go" && haveTwins && unwatched.ok() {
			note += fmt.Sprintf("; in the same window, at twice this load: the watched server against its unwatched twin (a bystander, so without what the port test costs every server) %s CPU per chunk, two unwatched twins %s, the difference paired by repeat %s; two servers that cost the same came out up to %.1f%% apart in CPU time here",
				twin.pct(), unwatched.pct(), excess.pct(), 100*max(math.Abs(unwatched.Min), math.Abs(unwatched.Max)))
		}
		d.target(fmt.Sprintf("%s server: CPU with tokenwire within +%.0f%% of its baseline (paired by repeat)", stack, limit*100), cpu.pct(),
			atMost(cpu, limit)+note, "2")
		d.target(fmt.Sprintf("%s server: p99 chunk latency with tokenwire within the baseline's own range (%s ms)", stack, bp99.f(3)), p99.f(3)+" ms", within(p99, bp99), "2")
	}
	d.p("\n")
	bpfByProgram(d, bt, by)
	exportedTable(d, variants, sp)
	for _, stack := range []string{"go", "python"} {
		if err := plotLatency(ht, stack); errors.Is(err, errNoData) {
			continue // the run had no variant of this stack
		} else if err != nil {
			return err
		}
		d.p("![chunk delivery latency, %s server](bench/results/latency-%s.png)\n\n", stack, stack)
	}
	d.p("Raw: `bench/results/overhead.csv` (every repeat), `overhead-bpf.csv` (BPF by program), `overhead-hist.csv` (latency histograms).\n\n")
	return nil
}

// probeTable shows what a new server costs the collector once: from the
// server's start until the collector reported its TLS library probed
// (reading its executable, the verifier's pass over the uprobe programs,
// which each variant's fresh collector loads on its first target, and the
// attach).
func probeTable(d *doc, variants []string, by map[string][]orow, sp func(string, func(orow) float64) spread) {
	var rows []string
	for _, v := range variants {
		if !strings.HasSuffix(v, "/tokenwire") || by[v][0]["probe_collector_cpu_s"] == "" {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s |\n", v,
			sp(v, func(r orow) float64 { return num(r, "probe_collector_cpu_s") }).f(3),
			sp(v, func(r orow) float64 { return num(r, "probe_wait_s") }).f(1)))
	}
	if len(rows) == 0 {
		return
	}
	d.p("\nOnce per new server, before the window: the collector finds it at its next /proc scan (every 5 s) and probes its TLS library; the first probe of a collector also loads the uprobe programs (the kernel's verifier).\n\n")
	d.p("| variant | collector CPU from the server's start until probed, s | server start to probed, s |\n| --- | --- | --- |\n")
	for _, r := range rows {
		d.p("%s", r)
	}
}

// writeShareNote compares the CPU target with an estimate of what the
// write program alone costs the server per chunk: its mean run time in the
// stats window (runs of every tw_st_sent program, which also run on the
// clients' request writes) less the most an empty program on its hook
// took per run in section 1, once per chunk (each chunk is at least one
// write of the server), over the baseline's CPU per chunk in the same
// repeat. The write program runs inside the server's own writes.
func writeShareNote(d *doc, bt *benchutil.Table, v, base string, by map[string][]orow, limit float64) string {
	empty := d.emptyWriteNs
	if empty == 0 {
		return ""
	}
	type sum struct{ ns, cnt float64 }
	sent := map[string]*sum{} // by repeat
	for _, r := range bt.Rows {
		if r["variant"] != v || !strings.HasPrefix(r["program"], "tw_st_sent") {
			continue
		}
		if sent[r["repeat"]] == nil {
			sent[r["repeat"]] = &sum{}
		}
		sent[r["repeat"]].ns += num(r, "run_ns")
		sent[r["repeat"]].cnt += num(r, "run_cnt")
	}
	var x []float64
	for _, b := range by[base] {
		s := sent[b["repeat"]]
		if s == nil || s.cnt == 0 {
			x = append(x, math.NaN())
			continue
		}
		x = append(x, (s.ns/s.cnt-empty)/(num(b, "server_cpu_s")*1e9/num(b, "chunks")))
	}
	share := spreadOf(x)
	if !share.ok() {
		return ""
	}
	what := fmt.Sprintf("the write program alone (its mean ns per run in the stats window, less the empty program's %.0f, section 1's most, once per chunk) is an estimated %.1f%% [%.1f%% to %.1f%%] of the baseline's CPU per chunk",
		empty, share.Med*100, share.Min*100, share.Max*100)
	if share.complete() && share.Min > limit {
		return "; " + what + ", over the limit in every repeat: the target is below the write program's own cost here"
	}
	return "; " + what
}

// errNoData: a plot would have nothing to draw.
var errNoData = errors.New("no data")

// isTwin says whether v is a twin variant: two servers, twice the load.
func isTwin(v string) bool {
	_, obs, _ := strings.Cut(v, "/")
	return strings.HasPrefix(obs, "twin")
}

// twinDiff is a twin variant's first server's CPU per chunk against its
// twin's in the same window, less 1 (NaN when either delivered nothing).
func twinDiff(r orow) float64 {
	if num(r, "chunks") == 0 || num(r, "twin_chunks") == 0 || num(r, "twin_server_cpu_s") == 0 {
		return math.NaN()
	}
	return (num(r, "server_cpu_s")/num(r, "chunks"))/(num(r, "twin_server_cpu_s")/num(r, "twin_chunks")) - 1
}

// twinTable shows the twin variants: two identical Go servers under
// identical loads in the same windows, one of them watched (twin) or
// neither (twin-unwatched). Drift between windows moves both alike, so
// twin-unwatched measures how far apart CPU time puts two servers that
// cost the same, and twin what watching one adds over a bystander.
func twinTable(d *doc, by map[string][]orow, sp func(string, func(orow) float64) spread) (twin, unwatched, excess spread, ok bool) {
	if by["go/twin"] == nil || by["go/twin-unwatched"] == nil {
		return spread{}, spread{}, spread{}, false
	}
	d.p("\n**Twins, in the same window.** Two identical Go servers under identical loads (%s streams each) run side by side, which doubles the host's load; in go/twin the collector tracks streams on one of the two ports (the other is a bystander: its writes run the stream programs up to the port test), in go/twin-unwatched on neither (both are bystanders). Which port is the first server's alternates by repeat. The first server is the watched one in go/twin; %s. The first server's CPU per chunk against the second's, in the same window:\n\n",
		by["go/twin"][0]["streams"], startOrder(by["go/twin"], by["go/twin-unwatched"]))
	d.p("| variant | first server's CPU per chunk vs its twin's | first server, cores | twin, cores | first server's p99 ms | twin's p99 ms | twin's errors |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, v := range []string{"go/twin", "go/twin-unwatched"} {
		d.p("| %s | %s | %s | %s | %s | %s | %s |\n", v, sp(v, twinDiff).pct(),
			sp(v, func(r orow) float64 { return r.cores("server_cpu_s") }).f(3),
			sp(v, func(r orow) float64 { return r.cores("twin_server_cpu_s") }).f(3),
			sp(v, p99Of).f(3), sp(v, func(r orow) float64 { return num(r, "twin_latency_p99_ms") }).f(3),
			sp(v, func(r orow) float64 { return num(r, "twin_errors") }).f(0))
	}
	var x []float64
	for _, a := range by["go/twin"] {
		for _, b := range by["go/twin-unwatched"] {
			if a["repeat"] == b["repeat"] {
				x = append(x, twinDiff(a)-twinDiff(b))
			}
		}
	}
	excess = spreadOf(x)
	d.p("\nWhat watching one twin adds over the unwatched pair's own difference, paired by repeat: %s of the bystander twin's CPU per chunk. It leaves out what the port test costs every server (both twins pay it), and it is at twice the load of the other variants.\n", excess.pct())
	return sp("go/twin", twinDiff), sp("go/twin-unwatched", twinDiff), excess, true
}

// startOrder says which of the twins' servers started first in the
// repeats of the twin variants, from overhead.csv's twin_first column;
// runs without it always started the first server first.
func startOrder(variants ...[]orow) string {
	var out []string
	for _, rows := range variants {
		if len(rows) == 0 {
			continue
		}
		if _, ok := rows[0]["twin_first"]; !ok {
			return "the first server is always started first, in both variants"
		}
		n := 0
		for _, r := range rows {
			if r["twin_first"] == "true" {
				n++
			}
		}
		out = append(out, fmt.Sprintf("%d of %d repeats of %s", n, len(rows), rows[0]["variant"]))
	}
	return "the second server is started first in " + strings.Join(out, " and in ") + ", the first in the others"
}

// rowOf is the overhead.csv row of r's variant and repeat (nil if none).
func rowOf(by map[string][]orow, r map[string]string) map[string]string {
	for _, o := range by[r["variant"]] {
		if o["repeat"] == r["repeat"] {
			return o
		}
	}
	return nil
}

func bpfByProgram(d *doc, bt *benchutil.Table, by map[string][]orow) {
	type key struct{ v, p string }
	per := map[key][]float64{}
	runs := map[key][]float64{}
	var keys []key
	for _, r := range bt.Rows {
		k := key{r["variant"], r["program"]}
		if per[k] == nil {
			keys = append(keys, k)
		}
		per[k] = append(per[k], perStatsChunk(r, rowOf(by, r), "run_ns"))
		runs[k] = append(runs[k], perStatsChunk(r, rowOf(by, r), "run_cnt"))
	}
	if len(keys) == 0 {
		return
	}
	slices.SortFunc(keys, func(a, b key) int { return strings.Compare(a.v+a.p, b.v+b.p) })
	d.p("The collector's BPF programs per delivered chunk under this load, in the stats window (gross: every socket on the host; section 1 has them net of background, beside the floor):\n\n")
	d.p("| variant | program | runs per chunk | ns per chunk |\n| --- | --- | --- | --- |\n")
	for _, k := range keys {
		d.p("| %s | %s | %s | %s |\n", k.v, k.p, spreadOf(runs[k]).f(2), spreadOf(per[k]).f(0))
	}
	d.p("\n")
}

func exportedTable(d *doc, variants []string, sp func(string, func(orow) float64) spread) {
	d.p("What the collectors exported over each whole run (debug exporter) against the streams the clients completed:\n\n| variant | streams completed | spans exported | metric data points |\n| --- | --- | --- | --- |\n")
	for _, v := range variants {
		if strings.HasSuffix(v, "/baseline") {
			continue
		}
		d.p("| %s | %s | %s | %s |\n", v, sp(v, func(r orow) float64 { return num(r, "streams_completed") }).f(0),
			sp(v, func(r orow) float64 { return num(r, "collector_spans_exported") }).f(0),
			sp(v, func(r orow) float64 { return num(r, "collector_metric_points_exported") }).f(0))
	}
	d.p("\n")
}
