package main

import (
	"slices"
	"strconv"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
func u(x uint64) string   { return strconv.FormatUint(x, 10) }

var rowHeader = []string{"repeat", "variant", "streams", "window_s", "cpu_window_s", "chunks", "streams_completed", "errors",
	"latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_p999_ms", "latency_max_ms",
	"ttft_client_p50_ms", "ttft_client_p99_ms",
	"server_cpu_s", "collector_cpu_s", "loadgen_cpu_s",
	"server_rss_bytes", "server_hwm_bytes", "collector_rss_bytes", "collector_hwm_bytes",
	"stats_window_s", "stats_chunks", "bpf_run_ns", "bpf_run_cnt", "collector_spans_exported", "collector_metric_points_exported",
	"host_busy_cores", "others_cores", "steal_cores", "loadavg1", "probe_collector_cpu_s", "probe_wait_s",
	"server_port", "twin_port", "twin_first", "twin_server_cpu_s", "twin_loadgen_cpu_s", "twin_chunks", "twin_errors", "twin_latency_p99_ms"}

func rowCSV(r row) []string {
	return []string{strconv.Itoa(r.Repeat), r.Variant, strconv.Itoa(r.Streams), f3(r.Window), f3(r.CPUWindow),
		strconv.Itoa(r.Load.Chunks), strconv.Itoa(r.Load.Completed), strconv.Itoa(r.Load.Errors),
		f3(at(r.Load.LatencyMs, 0)), f3(at(r.Load.LatencyMs, 1)), f3(at(r.Load.LatencyMs, 2)), f3(at(r.Load.LatencyMs, 3)), f3(at(r.Load.LatencyMs, 4)),
		f3(at(r.Load.TTFTMs, 0)), f3(at(r.Load.TTFTMs, 1)),
		f3(r.ServerCPU), f3(r.CollectorCPU), f3(r.LoadCPU),
		u(r.ServerMem.RSS), u(r.ServerMem.HWM), u(r.CollectorMem.RSS), u(r.CollectorMem.HWM),
		f3(r.StatsWindow), strconv.Itoa(r.Load.StatsChunks), u(r.BPFRunNs), u(r.BPFRunCnt), strconv.Itoa(r.Exported.Spans), strconv.Itoa(r.Exported.Points),
		f3(r.Host.BusyCores), f3(r.Host.OthersCores), f3(r.Host.StealCores), f3(r.Host.LoadEnd),
		f3(r.ProbeCPU), f3(r.ProbeWait),
		strconv.Itoa(r.ServerPort), strconv.Itoa(r.Twin.Port), strconv.FormatBool(r.TwinFirst), f3(r.Twin.ServerCPU), f3(r.Twin.LoadCPU),
		strconv.Itoa(r.Twin.Load.Chunks), strconv.Itoa(r.Twin.Load.Errors), f3(at(r.Twin.Load.LatencyMs, 2))}
}

// writeResults writes overhead.csv (a row per variant and repeat),
// overhead-bpf.csv (the collector's programs by name, in the stats
// window, with the chunks delivered in it), overhead-hist.csv
// (chunk latency histograms per variant and repeat) and, with the memory
// measurement, memory.csv and bpf-maps.csv.
func writeResults(res *benchutil.Results, rows []row, mem *memResult, variants []string) error {
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, rowCSV(r))
	}
	if err := res.WriteCSV("overhead.csv", rowHeader, recs); err != nil {
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
			recs = append(recs, []string{strconv.Itoa(r.Repeat), r.Variant, n, u(pr.Ns), u(pr.Cnt), strconv.Itoa(r.Load.StatsChunks)})
		}
	}
	if err := res.WriteCSV("overhead-bpf.csv", []string{"repeat", "variant", "program", "run_ns", "run_cnt", "stats_chunks"}, recs); err != nil {
		return err
	}
	bounds := histBounds()
	recs = nil
	for _, r := range rows {
		for i, c := range r.Load.Hist {
			if c == 0 {
				continue
			}
			ub := "+Inf"
			if i < len(bounds) {
				ub = f3(bounds[i])
			}
			recs = append(recs, []string{strconv.Itoa(r.Repeat), r.Variant, ub, u(c)})
		}
	}
	if err := res.WriteCSV("overhead-hist.csv", []string{"repeat", "variant", "le_us", "count"}, recs); err != nil {
		return err
	}
	if mem == nil {
		return nil
	}
	recs = [][]string{
		{"collector_idle", u(mem.Idle.RSS), u(mem.Idle.HWM), f3(mem.IdleCPU), ""},
		{"collector_open_streams", u(mem.Streaming.RSS), u(mem.Streaming.HWM), f3(mem.StreamingCPU), mem.Connected},
		{"server_open_streams", u(mem.ServerAt.RSS), u(mem.ServerAt.HWM), "", mem.Connected},
	}
	if err := res.WriteCSV("memory.csv", []string{"what", "rss_bytes", "hwm_bytes", "cpu_cores", "note"}, recs); err != nil {
		return err
	}
	recs = nil
	for _, m := range mem.Maps {
		recs = append(recs, []string{strconv.Itoa(int(m.ID)), m.Name, m.Type, strconv.Itoa(int(m.MaxEntries)), u(m.Memlock)})
	}
	return res.WriteCSV("bpf-maps.csv", []string{"id", "name", "type", "max_entries", "memlock_bytes"}, recs)
}
