// Command overhead measures what observing a streaming (SSE) server costs,
// three ways, interleaved in one run:
//
//   - baseline: the server alone;
//   - tokenwire: the ocb-built collector (_build/tokenwire) running the
//     default pipeline (config.yaml: stream metrics and one span per stream),
//     with an overlay that moves its listening ports and points the stream
//     probe at the server's port;
//   - interceptor: the same server instrumented in-process with the
//     OpenTelemetry Go SDK, recording the same measurements (TTFT, chunk
//     interval histogram, chunks, bytes, duration; one SERVER span per
//     stream with a first_chunk event) and exporting them over OTLP/gRPC to
//     the same collector binary running the same pipelines with an otlp
//     receiver in place of tokenwire.
//
// The SSE server, the load generator and the collector are separate
// processes (this binary re-executes itself as "server", "load" and
// "idle"). Per variant and repeat it records client-side chunk delivery
// latency (arrival minus the time the server scheduled the event), server
// and collector CPU seconds (/proc/<pid>/stat), their RSS (VmRSS, VmHWM)
// and the run time of the collector's BPF programs (kernel bpf stats).
// It also sweeps the stream count to find where the server saturates, and
// measures the collector's memory idle and with 10,000 open streams, with
// the BPF maps' memlock by map.
//
// Needs root. Traffic stays on 127.0.0.1; every loop and wait is bounded;
// on SIGINT/SIGTERM the child processes are stopped before exiting.
//
//	go build -o /tmp/overhead ./bench/overhead && /tmp/overhead -collector _build/tokenwire
package main

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

var (
	collectorBin = flag.String("collector", "_build/tokenwire", "the ocb-built collector")
	baseConfig   = flag.String("config", "config.yaml", "the collector's default pipeline")
	port         = flag.Int("port", 18000, "the SSE server's port on 127.0.0.1")
	streams      = flag.Int("streams", 500, "concurrent streams")
	interval     = flag.Duration("interval", 10*time.Millisecond, "time between events (10ms = 100 chunks/s)")
	chunks       = flag.Int("chunks", 200, "events per stream (each client then opens a new one)")
	duration     = flag.Duration("duration", 20*time.Second, "measured window per variant and repeat")
	warmup       = flag.Duration("warmup", 3*time.Second, "load before the window")
	alsoStreams  = flag.Int("also-streams", 0, "also compare the variants (same repeats, interleaved) at this stream count, e.g. one below saturation; 0: no")
	repeats      = flag.Int("repeats", 3, "repeats (variant order rotates each repeat)")
	variantsFlag = flag.String("variants", "baseline,tokenwire,interceptor", "variants to run")
	sweepFlag    = flag.String("sweep", "100,250,500,1000", "stream counts for the saturation sweep (baseline and tokenwire); empty: none")
	sweepDur     = flag.Duration("sweep-duration", 8*time.Second, "measured window per sweep point")
	idleConns    = flag.Int("idle-conns", 10000, "open streams for the memory measurement; 0: skip")
	outDir       = flag.String("outdir", "bench/results", "where CSV, PNG and the markdown fragment go")
)

func main() {
	if len(os.Args) > 1 {
		var err error
		switch os.Args[1] {
		case "server":
			err = runServer(os.Args[2:])
		case "load":
			err = runLoad(os.Args[2:])
		case "idle":
			err = runIdle(os.Args[2:])
		default:
			goto orchestrate
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, os.Args[1]+":", err)
			os.Exit(1)
		}
		return
	}
orchestrate:
	flag.Parse()
	if err := orchestrate(); err != nil {
		select {
		case <-interrupted:
			// The signal handler is stopping the children and will exit;
			// this error is only a consequence of that.
			time.Sleep(2 * teststack.DefaultGrace)
		default:
		}
		fmt.Fprintln(os.Stderr, "overhead:", err)
		os.Exit(1)
	}
}

// row is one variant in one repeat.
type row struct {
	Repeat       int
	Variant      string
	Streams      int
	Load         loadResult
	ServerCPU    float64 // CPU seconds (utime+stime, all threads) in the window
	CollectorCPU float64
	LoadCPU      float64
	ServerMem    benchutil.Mem // at the end of the window
	CollectorMem benchutil.Mem
	BPFRunNs     uint64 // in the window, the collector's programs only
	BPFRunCnt    uint64 // runs in the window
	// BPFByProg splits BPFRunNs and BPFRunCnt by program name.
	BPFByProg map[string]progRun
	Window    float64  // nominal window, seconds: chunks count inside it
	CPUWindow float64  // measured time between the CPU snapshots, seconds
	Exported  exported // what the collector's debug exporter saw, whole run
}

// Ports the bench's own processes listen on (127.0.0.1 only). They are
// away from the defaults (8888, 8889, 13133, 4317) that other collectors
// on the host may hold.
const (
	telemetryPort = 18888
	promPort      = 18889
	healthPort    = 23133
	otlpPort      = 14317
)

type env struct {
	self, tmp string
	twArgs    []string // collector arguments, tokenwire variant
	icArgs    []string // collector arguments, interceptor variant
	stats     io.Closer
	logs      *os.File
	procs     *teststack.Group
}

func (e *env) healthURL() string    { return fmt.Sprintf("http://127.0.0.1:%d/", healthPort) }
func (e *env) otlpEndpoint() string { return fmt.Sprintf("127.0.0.1:%d", otlpPort) }
func (e *env) serverAddr() string   { return fmt.Sprintf("127.0.0.1:%d", *port) }

// ports are the ports that must be free before a variant starts.
func (e *env) ports() []int { return []int{*port, telemetryPort, promPort, healthPort, otlpPort} }

func orchestrate() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (the collector loads BPF programs)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if _, err := os.Stat(*collectorBin); err != nil {
		return fmt.Errorf("collector %s: %w (run make build)", *collectorBin, err)
	}
	tmp, err := os.MkdirTemp("", "tw-overhead-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{self: self, tmp: tmp}
	if err := e.writeConfigs(); err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	if e.logs, err = os.Create(filepath.Join(tmp, "children.log")); err != nil {
		return err
	}
	defer e.logs.Close()
	e.procs = &teststack.Group{}
	defer e.procs.StopAll()
	// Kernel bpf stats through a BPF_ENABLE_STATS file descriptor, not the
	// kernel.bpf_stats_enabled sysctl: the kernel counts holders and turns
	// the stats off again when the last one closes, so the host's setting
	// is restored even if this process is killed. They are on for the
	// whole run: every variant pays the same (tiny) bookkeeping.
	if e.stats, err = ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err != nil {
		return fmt.Errorf("enable bpf stats: %w", err)
	}
	defer e.stats.Close()
	e.handleSignals()

	variants := strings.Split(*variantsFlag, ",")
	compare := func(n int) ([]row, error) {
		var rows []row
		for r := range *repeats {
			// Rotate the order each repeat so no variant always runs first
			// (cold caches) or right after another's teardown.
			for k := range variants {
				v := variants[(k+r)%len(variants)]
				fmt.Fprintf(os.Stderr, "overhead: repeat %d/%d, %s, %d streams\n", r+1, *repeats, v, n)
				rw, err := e.runVariant(v, n, *duration)
				if err != nil {
					e.dumpLogs()
					return nil, fmt.Errorf("%s (repeat %d): %w", v, r+1, err)
				}
				rw.Repeat = r + 1
				rows = append(rows, rw)
				printRow(rw)
			}
		}
		return rows, nil
	}
	rows, err := compare(*streams)
	if err != nil {
		return err
	}
	var rows2 []row
	if *alsoStreams > 0 {
		if rows2, err = compare(*alsoStreams); err != nil {
			return err
		}
	}

	var sweep []row
	if *sweepFlag != "" {
		for _, s := range strings.Split(*sweepFlag, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("-sweep: %w", err)
			}
			for _, v := range []string{"baseline", "tokenwire"} {
				fmt.Fprintf(os.Stderr, "overhead: sweep %s, %d streams\n", v, n)
				rw, err := e.runVariant(v, n, *sweepDur)
				if err != nil {
					e.dumpLogs()
					return fmt.Errorf("sweep %s %d: %w", v, n, err)
				}
				sweep = append(sweep, rw)
				printRow(rw)
			}
		}
	}

	var mem *memResult
	if *idleConns > 0 {
		fmt.Fprintf(os.Stderr, "overhead: memory, idle and %d open streams\n", *idleConns)
		if mem, err = e.memory(*idleConns); err != nil {
			e.dumpLogs()
			return fmt.Errorf("memory: %w", err)
		}
	}
	return writeResults(rows, rows2, sweep, mem, variants)
}

// interrupted is closed when SIGINT, SIGTERM or SIGHUP arrived; the
// handler then stops the children and exits.
var interrupted = make(chan struct{})

// handleSignals stops every child (so no collector keeps its programs
// attached and no server keeps its port), closes the stats fd and removes
// the temporary directory, then exits 130.
func (e *env) handleSignals() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		close(interrupted)
		fmt.Fprintf(os.Stderr, "overhead: %v: stopping child processes\n", s)
		e.procs.StopAll()
		e.stats.Close()
		os.RemoveAll(e.tmp)
		os.Exit(130)
	}()
}

func (e *env) dumpLogs() {
	b, _ := os.ReadFile(e.logs.Name())
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	os.Stderr.Write(b)
}

// writeConfigs writes the overlays for the two collectors. Both run the
// default pipeline file (-config) unchanged except for:
//   - ports: its listening ports move to the bench's own (other collectors
//     on this host may hold 8888, 8889 and 13133), and the tokenwire
//     receiver tracks streams on our server's port;
//   - logs: sampling off, so that every per-batch line of the debug
//     exporter, which countExported adds up, is written (the collector's
//     default sampler keeps 10 lines per message per 10 s, then 1 in 100:
//     a one-span-batch-per-second pipeline loses a line now and then);
//   - interceptor only: an otlp receiver replaces tokenwire in the metrics
//     and traces pipelines.
//
// So both variants' telemetry goes through the same processors to the same
// exporters: what differs is only where the measurements come from.
func (e *env) writeConfigs() error {
	ports := fmt.Sprintf(`receivers:
  tokenwire:
    streams:
      ports: [%d]
exporters:
  prometheus:
    endpoint: 127.0.0.1:%d
extensions:
  health_check:
    endpoint: 127.0.0.1:%d
service:
  telemetry:
    logs:
      sampling:
        enabled: false
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
                without_scope_info: true
                without_units: true
                without_type_suffix: true
`, *port, promPort, healthPort, telemetryPort)
	otlp := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
service:
  pipelines:
    metrics:
      receivers: [otlp]
    traces:
      receivers: [otlp]
`, e.otlpEndpoint())
	portsFile := filepath.Join(e.tmp, "ports-overlay.yaml")
	otlpFile := filepath.Join(e.tmp, "otlp-overlay.yaml")
	if err := os.WriteFile(portsFile, []byte(ports), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(otlpFile, []byte(otlp), 0o644); err != nil {
		return err
	}
	e.twArgs = []string{"--config", *baseConfig, "--config", portsFile}
	e.icArgs = []string{"--config", *baseConfig, "--config", portsFile, "--config", otlpFile}
	return nil
}

// snapshot is the cumulative counters at one instant.
type snapshot struct {
	at                      time.Time
	server, collector, load float64
	bpfNs, bpfCnt           uint64
	byProg                  map[string]progRun
}

// progRun is one BPF program's run time and run count.
type progRun struct{ Ns, Cnt uint64 }

// snap reads the counters; any error (a process gone) fails the run
// rather than turning into a zero.
func snap(server, collector, load *teststack.Proc) (snapshot, error) {
	s := snapshot{at: time.Now()}
	var err error
	if s.server, err = benchutil.CPUSeconds(server.Pid()); err != nil {
		return s, fmt.Errorf("server CPU: %w", err)
	}
	if s.load, err = benchutil.CPUSeconds(load.Pid()); err != nil {
		return s, fmt.Errorf("load generator CPU: %w", err)
	}
	if collector != nil {
		if s.collector, err = benchutil.CPUSeconds(collector.Pid()); err != nil {
			return s, fmt.Errorf("collector CPU: %w", err)
		}
		// Only programs the collector holds: others on the host (other
		// tests, other tools) are not ours to count.
		ps, err := benchutil.Programs(collector.Pid())
		if err != nil {
			return s, fmt.Errorf("collector's BPF programs: %w", err)
		}
		s.bpfNs, s.bpfCnt = benchutil.SumRunNs(ps)
		s.byProg = map[string]progRun{}
		for _, p := range ps {
			r := s.byProg[p.Name]
			s.byProg[p.Name] = progRun{r.Ns + p.RunNs, r.Cnt + p.RunCnt}
		}
	}
	return s, nil
}

// sleepUntil sleeps until t (no-op if t has passed).
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// runVariant runs one variant at nStreams for one window: collector (if
// any), server, load generator; CPU and BPF counters are read at the
// window's start and end, which the load generator uses too (passed as
// absolute times), so chunks and CPU cover the same interval.
func (e *env) runVariant(variant string, nStreams int, window time.Duration) (rw row, err error) {
	rw = row{Variant: variant, Streams: nStreams, Window: window.Seconds()}
	if err := teststack.WaitPortsFree(e.ports(), 2*time.Minute); err != nil {
		return rw, err
	}
	coll, err := e.startCollector(variant)
	if err != nil {
		return rw, err
	}
	if coll != nil {
		defer func() {
			coll.Stop() // after the server (defers run last first)
			if err != nil {
				fmt.Fprintln(e.logs, coll.Tail(60))
			}
		}()
	}
	srv, err := e.startServer(variant)
	if err != nil {
		return rw, err
	}
	defer srv.Stop()
	resFile := filepath.Join(e.tmp, "load.json")
	os.Remove(resFile)
	from := time.Now().Add(*warmup)
	to := from.Add(window)
	load, err := e.procs.Start(teststack.ProcOptions{Name: "load", Log: e.logs}, e.self, "load", "-addr", e.serverAddr(),
		"-streams", strconv.Itoa(nStreams), "-chunks", strconv.Itoa(*chunks), "-interval", interval.String(),
		"-from", strconv.FormatInt(from.UnixNano(), 10), "-to", strconv.FormatInt(to.UnixNano(), 10), "-out", resFile)
	if err != nil {
		return rw, err
	}
	defer load.Stop()
	sleepUntil(from)
	a, err := snap(srv, coll, load)
	if err != nil {
		return rw, err
	}
	sleepUntil(to)
	b, err := snap(srv, coll, load)
	if err != nil {
		return rw, err
	}
	if rw.ServerMem, err = benchutil.Memory(srv.Pid()); err != nil {
		return rw, fmt.Errorf("server memory: %w", err)
	}
	if coll != nil {
		if rw.CollectorMem, err = benchutil.Memory(coll.Pid()); err != nil {
			return rw, fmt.Errorf("collector memory: %w", err)
		}
	}
	rw.CPUWindow = b.at.Sub(a.at).Seconds()
	rw.ServerCPU, rw.CollectorCPU, rw.LoadCPU = b.server-a.server, b.collector-a.collector, b.load-a.load
	rw.BPFRunNs, rw.BPFRunCnt = b.bpfNs-a.bpfNs, b.bpfCnt-a.bpfCnt
	if b.byProg != nil {
		rw.BPFByProg = map[string]progRun{}
		for name, r := range b.byProg {
			rw.BPFByProg[name] = progRun{r.Ns - a.byProg[name].Ns, r.Cnt - a.byProg[name].Cnt}
		}
	}
	// The load generator finishes the streams in flight (each at most
	// -chunks intervals, plus its own per-stream deadline) and exits.
	if err := load.Wait(time.Duration(*chunks)*(*interval)*5 + 60*time.Second); err != nil {
		return rw, fmt.Errorf("load: %w", err)
	}
	if exited(srv) || (coll != nil && exited(coll)) {
		return rw, errors.New("server or collector exited during the run")
	}
	// Server first, so that the interceptor flushes its last spans and the
	// tokenwire collector sees the last streams end; then the collector,
	// which flushes its pipelines on the way out.
	srv.Stop()
	if coll != nil {
		coll.Stop()
		if rw.Exported, err = countExported(coll.LogPath()); err != nil {
			return rw, err
		}
	}
	raw, err := os.ReadFile(resFile)
	if err != nil {
		return rw, err
	}
	if err := json.Unmarshal(raw, &rw.Load); err != nil {
		return rw, err
	}
	return rw, nil
}

// cores is CPU seconds per second of the measured window.
func (r row) cores(cpuSec float64) float64 {
	if r.CPUWindow <= 0 {
		return 0
	}
	return cpuSec / r.CPUWindow
}

func printRow(r row) {
	fmt.Fprintf(os.Stderr, "  %-11s streams=%d chunks=%d (%.0f/s) errors=%d latency p50=%.3fms p99=%.3fms max=%.1fms server=%.2fs coll=%.2fs load=%.2fs bpf=%.4fs (%d runs) srvRSS=%.1fMiB collRSS=%.1fMiB\n",
		r.Variant, r.Streams, r.Load.Chunks, float64(r.Load.Chunks)/r.Window, r.Load.Errors, at(r.Load.LatencyMs, 0), at(r.Load.LatencyMs, 2), at(r.Load.LatencyMs, 4),
		r.ServerCPU, r.CollectorCPU, r.LoadCPU, float64(r.BPFRunNs)/1e9, r.BPFRunCnt, mib(r.ServerMem.RSS), mib(r.CollectorMem.RSS))
	if r.Variant != "baseline" {
		fmt.Fprintf(os.Stderr, "  %-11s streams completed=%d, collector exported spans=%d metric points=%d\n",
			"", r.Load.Completed, r.Exported.Spans, r.Exported.Points)
	}
	if r.Load.FirstError != "" {
		fmt.Fprintf(os.Stderr, "  first load error: %s\n", r.Load.FirstError)
	}
}

func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// ---------------------------------------------------------------- memory

type memResult struct {
	Idle, Streaming10k benchutil.Mem
	IdleCPU            float64 // cores, over 10 s with nothing to observe
	CPU10k             float64 // cores, over the 12 s with the streams open
	ServerAt10k        benchutil.Mem
	Connected          string
	Maps               []benchutil.MapStat
	Maps10k            []benchutil.MapStat
}

// memory starts the tokenwire collector and the server, measures the
// collector idle (CPU over 10 s starting 2 s after the server, memory at
// the end of those), then with n open streams.
func (e *env) memory(n int) (*memResult, error) {
	m := &memResult{}
	if err := teststack.WaitPortsFree(e.ports(), 2*time.Minute); err != nil {
		return nil, err
	}
	coll, err := e.startCollector("tokenwire")
	if err != nil {
		return nil, err
	}
	defer coll.Stop()
	srv, err := e.startServer("baseline")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	pid := coll.Pid()
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	c0, err := benchutil.CPUSeconds(pid)
	if err != nil {
		return nil, err
	}
	time.Sleep(10 * time.Second)
	c1, err := benchutil.CPUSeconds(pid)
	if err != nil {
		return nil, err
	}
	m.IdleCPU = (c1 - c0) / time.Since(t0).Seconds()
	if m.Idle, err = benchutil.Memory(pid); err != nil {
		return nil, err
	}
	m.Maps, _ = benchutil.Maps(pid)

	idle, err := e.procs.Start(teststack.ProcOptions{Name: "idle", Log: e.logs, Lines: true}, e.self, "idle", "-addr", e.serverAddr(), "-conns", strconv.Itoa(n), "-hold", "120s")
	if err != nil {
		return nil, err
	}
	defer idle.Stop()
	if m.Connected, err = idle.WaitLine(90*time.Second, nil); err != nil {
		return nil, fmt.Errorf("idle connections not established within 90 s: %w", err)
	}
	// Two collection intervals' worth of the streams being open.
	t0 = time.Now()
	if c0, err = benchutil.CPUSeconds(pid); err != nil {
		return nil, err
	}
	time.Sleep(12 * time.Second)
	if c1, err = benchutil.CPUSeconds(pid); err != nil {
		return nil, err
	}
	m.CPU10k = (c1 - c0) / time.Since(t0).Seconds()
	if m.Streaming10k, err = benchutil.Memory(pid); err != nil {
		return nil, err
	}
	if m.ServerAt10k, err = benchutil.Memory(srv.Pid()); err != nil {
		return nil, err
	}
	m.Maps10k, _ = benchutil.Maps(pid)
	return m, nil
}

// ---------------------------------------------------------------- output

func writeCSV(path string, header []string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write(header)
	w.WriteAll(rows)
	return w.Error()
}

func f3(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
func u(x uint64) string   { return strconv.FormatUint(x, 10) }

func rowCSV(r row) []string {
	return []string{strconv.Itoa(r.Repeat), r.Variant, strconv.Itoa(r.Streams), f3(r.Window), f3(r.CPUWindow),
		strconv.Itoa(r.Load.Chunks), strconv.Itoa(r.Load.Completed), strconv.Itoa(r.Load.Errors),
		f3(at(r.Load.LatencyMs, 0)), f3(at(r.Load.LatencyMs, 1)), f3(at(r.Load.LatencyMs, 2)), f3(at(r.Load.LatencyMs, 3)), f3(at(r.Load.LatencyMs, 4)),
		f3(at(r.Load.TTFTMs, 0)), f3(at(r.Load.TTFTMs, 1)),
		f3(r.ServerCPU), f3(r.CollectorCPU), f3(r.LoadCPU),
		u(r.ServerMem.RSS), u(r.ServerMem.HWM), u(r.CollectorMem.RSS), u(r.CollectorMem.HWM),
		u(r.BPFRunNs), u(r.BPFRunCnt), strconv.Itoa(r.Exported.Spans), strconv.Itoa(r.Exported.Points)}
}

var rowHeader = []string{"repeat", "variant", "streams", "window_s", "cpu_window_s", "chunks", "streams_completed", "errors",
	"latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_p999_ms", "latency_max_ms",
	"ttft_client_p50_ms", "ttft_client_p99_ms",
	"server_cpu_s", "collector_cpu_s", "loadgen_cpu_s",
	"server_rss_bytes", "server_hwm_bytes", "collector_rss_bytes", "collector_hwm_bytes",
	"bpf_run_ns", "bpf_run_cnt", "collector_spans_exported", "collector_metric_points_exported"}
