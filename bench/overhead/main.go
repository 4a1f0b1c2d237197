// Command overhead measures what observing a streaming (SSE) server costs,
// three ways, interleaved in one run:
//
//   - baseline: the server alone;
//   - tokenwire: the ocb-built collector (_build/tokenwire) running the
//     default pipeline (config.yaml), with an overlay that moves its
//     listening ports and points the stream probe at the server's port;
//   - interceptor: the same server instrumented in-process with the
//     OpenTelemetry Go SDK (TTFT, interval histogram, chunks, bytes per
//     chunk), exporting over OTLP/gRPC to the same collector binary running
//     an otlp receiver instead of tokenwire.
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
// Needs root. Traffic stays on 127.0.0.1; every loop is bounded.
//
//	go build -o /tmp/overhead ./bench/overhead && /tmp/overhead -collector _build/tokenwire
package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bench/benchutil"
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
	ServerCPU    float64 // seconds in the window
	CollectorCPU float64
	LoadCPU      float64
	ServerMem    benchutil.Mem
	CollectorMem benchutil.Mem
	BPFRunNs     uint64 // in the window, all of the collector's programs
	BPFRunCnt    uint64
	Window       float64
}

type env struct {
	self, tmp    string
	twConfigs    []string // --config arguments for the tokenwire collector
	otlpConfig   string
	stats        io.Closer
	logs         *os.File
	healthURL    string
	otlpEndpoint string
}

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
	e := &env{self: self, tmp: tmp, healthURL: "http://127.0.0.1:23133/", otlpEndpoint: "127.0.0.1:14317"}
	if err := e.writeConfigs(); err != nil {
		return err
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	if e.logs, err = os.Create(filepath.Join(tmp, "children.log")); err != nil {
		return err
	}
	// Kernel bpf stats on for the whole run: every variant pays the same
	// (tiny) bookkeeping, and only tokenwire has programs to count.
	if e.stats, err = ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err != nil {
		return fmt.Errorf("enable bpf stats: %w", err)
	}
	defer e.stats.Close()

	variants := strings.Split(*variantsFlag, ",")
	compare := func(n int) ([]row, error) {
		var rows []row
		for r := range *repeats {
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

func (e *env) dumpLogs() {
	b, _ := os.ReadFile(e.logs.Name())
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	os.Stderr.Write(b)
}

// writeConfigs writes the overlay that runs the default pipeline on free
// ports (other collectors on this host may hold 8888, 8889 and 13133),
// tracking streams on our server's port, and the interceptor variant's
// collector config: the same processors and exporters fed by OTLP.
func (e *env) writeConfigs() error {
	telemetry := `  telemetry:
    metrics:
      level: normal
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: 18888
                without_scope_info: true
                without_units: true
                without_type_suffix: true
`
	overlay := fmt.Sprintf(`receivers:
  tokenwire:
    streams:
      ports: [%d]
exporters:
  prometheus:
    endpoint: 127.0.0.1:18889
extensions:
  health_check:
    endpoint: 127.0.0.1:23133
service:
%s`, *port, telemetry)
	otlp := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
processors:
  memory_limiter:
    check_interval: 1s
    limit_mib: 512
    spike_limit_mib: 128
  batch:
exporters:
  prometheus:
    endpoint: 127.0.0.1:18889
  debug:
    verbosity: basic
extensions:
  health_check:
    endpoint: 127.0.0.1:23133
service:
  extensions: [health_check]
  pipelines:
    metrics:
      receivers: [otlp]
      processors: [memory_limiter, batch]
      exporters: [prometheus, debug]
%s`, e.otlpEndpoint, telemetry)
	ov := filepath.Join(e.tmp, "tokenwire-overlay.yaml")
	if err := os.WriteFile(ov, []byte(overlay), 0o644); err != nil {
		return err
	}
	e.otlpConfig = filepath.Join(e.tmp, "interceptor-collector.yaml")
	if err := os.WriteFile(e.otlpConfig, []byte(otlp), 0o644); err != nil {
		return err
	}
	e.twConfigs = []string{"--config", *baseConfig, "--config", ov}
	return nil
}

func (e *env) start(name string, args ...string) (*exec.Cmd, *bufio.Reader, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = e.logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, bufio.NewReader(out), nil
}

func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// startCollector starts the collector for a variant and waits until its
// health check answers.
func (e *env) startCollector(variant string) (*exec.Cmd, error) {
	var args []string
	switch variant {
	case "tokenwire":
		args = e.twConfigs
	case "interceptor":
		args = []string{"--config", e.otlpConfig}
	default:
		return nil, nil
	}
	cmd, out, err := e.start(*collectorBin, args...)
	if err != nil {
		return nil, err
	}
	go io.Copy(e.logs, out)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(e.healthURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				time.Sleep(time.Second) // let the receiver finish attaching
				return cmd, nil
			}
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop(cmd)
	return nil, errors.New("collector did not become healthy within 60 s")
}

func (e *env) startServer(variant string) (*exec.Cmd, error) {
	args := []string{"server", "-addr", fmt.Sprintf("127.0.0.1:%d", *port), "-interval", interval.String()}
	if variant == "interceptor" {
		args = append(args, "-otlp", e.otlpEndpoint)
	}
	cmd, out, err := e.start(e.self, args...)
	if err != nil {
		return nil, err
	}
	line, err := out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		stop(cmd)
		return nil, fmt.Errorf("server did not start: %q %v", line, err)
	}
	go io.Copy(io.Discard, out)
	return cmd, nil
}

type snapshot struct {
	server, collector, load float64
	bpfNs, bpfCnt           uint64
}

func snap(server, collector, load *exec.Cmd) snapshot {
	var s snapshot
	s.server, _ = benchutil.CPUSeconds(server.Process.Pid)
	s.load, _ = benchutil.CPUSeconds(load.Process.Pid)
	if collector != nil {
		s.collector, _ = benchutil.CPUSeconds(collector.Process.Pid)
		ps, _ := benchutil.Programs(collector.Process.Pid)
		s.bpfNs, s.bpfCnt = benchutil.SumRunNs(ps)
	}
	return s
}

func (e *env) runVariant(variant string, nStreams int, window time.Duration) (row, error) {
	rw := row{Variant: variant, Streams: nStreams, Window: window.Seconds()}
	coll, err := e.startCollector(variant)
	if err != nil {
		return rw, err
	}
	defer stop(coll)
	srv, err := e.startServer(variant)
	if err != nil {
		return rw, err
	}
	defer stop(srv)
	resFile := filepath.Join(e.tmp, "load.json")
	os.Remove(resFile)
	load, out, err := e.start(e.self, "load", "-addr", fmt.Sprintf("127.0.0.1:%d", *port),
		"-streams", strconv.Itoa(nStreams), "-chunks", strconv.Itoa(*chunks), "-interval", interval.String(),
		"-warmup", warmup.String(), "-duration", window.String(), "-out", resFile)
	if err != nil {
		return rw, err
	}
	go io.Copy(io.Discard, out)
	time.Sleep(*warmup)
	a := snap(srv, coll, load)
	time.Sleep(window)
	b := snap(srv, coll, load)
	rw.ServerMem, _ = benchutil.Memory(srv.Process.Pid)
	if coll != nil {
		rw.CollectorMem, _ = benchutil.Memory(coll.Process.Pid)
	}
	// The load generator finishes its streams in flight and exits.
	done := make(chan error, 1)
	go func() { done <- load.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return rw, fmt.Errorf("load: %w", err)
		}
	case <-time.After(time.Duration(*chunks)*(*interval)*5 + 60*time.Second):
		load.Process.Kill()
		<-done
		return rw, errors.New("load generator did not finish")
	}
	rw.ServerCPU, rw.CollectorCPU, rw.LoadCPU = b.server-a.server, b.collector-a.collector, b.load-a.load
	rw.BPFRunNs, rw.BPFRunCnt = b.bpfNs-a.bpfNs, b.bpfCnt-a.bpfCnt
	raw, err := os.ReadFile(resFile)
	if err != nil {
		return rw, err
	}
	if err := json.Unmarshal(raw, &rw.Load); err != nil {
		return rw, err
	}
	return rw, nil
}

func printRow(r row) {
	fmt.Fprintf(os.Stderr, "  %-11s streams=%d chunks=%d (%.0f/s) errors=%d latency p50=%.3fms p99=%.3fms max=%.1fms server=%.2fs coll=%.2fs bpf=%.3fs srvRSS=%.1fMiB collRSS=%.1fMiB\n",
		r.Variant, r.Streams, r.Load.Chunks, float64(r.Load.Chunks)/r.Window, r.Load.Errors, at(r.Load.LatencyMs, 0), at(r.Load.LatencyMs, 2), at(r.Load.LatencyMs, 4),
		r.ServerCPU, r.CollectorCPU, float64(r.BPFRunNs)/1e9, mib(r.ServerMem.RSS), mib(r.CollectorMem.RSS))
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
// collector idle (12 s after start; CPU over the last 10 s), then with -idle-conns open streams.
func (e *env) memory(n int) (*memResult, error) {
	m := &memResult{}
	coll, err := e.startCollector("tokenwire")
	if err != nil {
		return nil, err
	}
	defer stop(coll)
	srv, err := e.startServer("baseline")
	if err != nil {
		return nil, err
	}
	defer stop(srv)
	pid := coll.Process.Pid
	time.Sleep(2 * time.Second)
	c0, _ := benchutil.CPUSeconds(pid)
	time.Sleep(10 * time.Second)
	c1, _ := benchutil.CPUSeconds(pid)
	m.IdleCPU = (c1 - c0) / 10
	m.Idle, _ = benchutil.Memory(pid)
	m.Maps, _ = benchutil.Maps(pid)

	idle, out, err := e.start(e.self, "idle", "-addr", fmt.Sprintf("127.0.0.1:%d", *port), "-conns", strconv.Itoa(n), "-hold", "120s")
	if err != nil {
		return nil, err
	}
	defer stop(idle)
	lineCh := make(chan string, 1)
	go func() {
		l, _ := out.ReadString('\n')
		lineCh <- strings.TrimSpace(l)
		io.Copy(io.Discard, out)
	}()
	select {
	case m.Connected = <-lineCh:
	case <-time.After(90 * time.Second):
		return nil, errors.New("idle connections not established within 90 s")
	}
	// Two collection intervals' worth of the streams being open.
	c0, _ = benchutil.CPUSeconds(pid)
	time.Sleep(12 * time.Second)
	c1, _ = benchutil.CPUSeconds(pid)
	m.CPU10k = (c1 - c0) / 12
	m.Streaming10k, _ = benchutil.Memory(pid)
	m.ServerAt10k, _ = benchutil.Memory(srv.Process.Pid)
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
	return []string{strconv.Itoa(r.Repeat), r.Variant, strconv.Itoa(r.Streams), f3(r.Window),
		strconv.Itoa(r.Load.Chunks), strconv.Itoa(r.Load.Completed), strconv.Itoa(r.Load.Errors),
		f3(at(r.Load.LatencyMs, 0)), f3(at(r.Load.LatencyMs, 1)), f3(at(r.Load.LatencyMs, 2)), f3(at(r.Load.LatencyMs, 3)), f3(at(r.Load.LatencyMs, 4)),
		f3(at(r.Load.TTFTMs, 0)), f3(at(r.Load.TTFTMs, 1)),
		f3(r.ServerCPU), f3(r.CollectorCPU), f3(r.LoadCPU),
		u(r.ServerMem.RSS), u(r.ServerMem.HWM), u(r.CollectorMem.RSS), u(r.CollectorMem.HWM),
		u(r.BPFRunNs), u(r.BPFRunCnt)}
}

var rowHeader = []string{"repeat", "variant", "streams", "window_s", "chunks", "streams_completed", "errors",
	"latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_p999_ms", "latency_max_ms",
	"ttft_client_p50_ms", "ttft_client_p99_ms",
	"server_cpu_s", "collector_cpu_s", "loadgen_cpu_s",
	"server_rss_bytes", "server_hwm_bytes", "collector_rss_bytes", "collector_hwm_bytes",
	"bpf_run_ns", "bpf_run_cnt"}
