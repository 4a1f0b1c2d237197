// Command overhead measures what observing a streaming server costs, on
// two stacks, interleaved in one run:
//
//   - Go (net/http SSE, this binary re-executed as "server"): baseline (the
//     server alone), tokenwire (the ocb-built collector running the
//     default pipeline, config.yaml, with stream tracking on the server's
//     port) and interceptor (the same server instrumented in-process with
//     the OpenTelemetry Go SDK, recording what tokenwire records and
//     exporting over OTLP/gRPC to the same collector binary, otlp receiver
//     in place of tokenwire);
//   - Python (the stack vLLM serves with: uvicorn + starlette, teststack's
//     server): baseline and tokenwire;
//   - on both stacks, bystander: the same collector with stream tracking
//     on another port, so that the server's streams are not observed. The
//     stream programs still run on every write and read of the server and
//     exit at the port test, and handshake tracking (every port, by
//     default) still times its connections: what tokenwire costs the
//     other processes of a host, and a control for the comparison (a
//     bystander's difference from the baseline is that cost plus what the
//     machine's noise leaves);
//   - on both stacks, idle: the collector binary with an otlp receiver in
//     place of tokenwire, which nothing sends to: a collector process
//     beside the server and no BPF program, so that a bystander's
//     difference from it is what the attached programs cost;
//   - Go, twin: the tokenwire variant with an identical second server
//     (-twin-port) under its own identical load in the same windows,
//     which the collector does not watch (a bystander). Host drift
//     between variants minutes apart (about 10% in a server's CPU per
//     chunk on a shared machine) moves both servers alike, so the
//     watched server's CPU per chunk against its twin's in the same
//     window is tokenwire's cost less a bystander's. Which of the two
//     ports is watched alternates by repeat, and which server starts
//     first every two repeats (the twin in 2-3, 6-7, ...);
//   - Go, twin-unwatched: the same two servers, the collector watching
//     neither (both are bystanders): how far apart CPU time puts two
//     servers that cost the same, started in the same orders.
//
// Every variant's load starts -settle after its server (a tokenwire
// variant's once the collector has also probed the server, which its /proc
// scan does within about 5 s), so that every server is as old when the
// windows start.
//
// Server, load generator and collector are separate processes. Per variant
// and repeat it records chunk delivery latency (Go: arrival minus the time
// the server scheduled the event; Python: arrival minus the time the app
// handed the event to the server, from the server's own report), server,
// collector and load-generator CPU, RSS and the other processes' CPU on
// the host during the window, and the collector's BPF programs' run time
// by program (by ID, from its file descriptors) in a stats window just
// before it: bpf stats cost every program run two clock reads, so they
// are on only there. It also measures the
// collector's memory idle and with -idle-conns open streams.
//
// Needs root. Traffic stays on 127.0.0.1; every loop and wait is bounded;
// on SIGINT/SIGTERM the child processes are stopped before exiting.
//
//	go build -o /tmp/overhead ./bench/overhead && /tmp/overhead -collector _build/tokenwire -repeats 1 -duration 5s
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

var (
	collectorFlags = benchutil.RegisterCollectorFlags()
	port           = flag.Int("port", 18000, "the Go SSE server's port on 127.0.0.1")
	pyPort         = flag.Int("py-port", 18001, "the Python server's port on 127.0.0.1")
	streams        = flag.Int("streams", 200, "concurrent streams")
	interval       = flag.Duration("interval", 10*time.Millisecond, "Go: time between events (10ms = 100 chunks/s)")
	chunks         = flag.Int("chunks", 200, "Go: events per stream (each client then opens a new one)")
	pyInterval     = flag.Duration("py-interval", 50*time.Millisecond, "Python: time between events")
	pyChunks       = flag.Int("py-chunks", 60, "Python: events per stream (each client then sends the next request on its connection)")
	duration       = flag.Duration("duration", 12*time.Second, "measured window per variant and repeat")
	warmup         = flag.Duration("warmup", 3*time.Second, "load before the window")
	statsWindow    = flag.Duration("stats-window", 4*time.Second, "the window between the warm-up and the CPU window, for every variant; in a tokenwire or bystander variant's, bpf stats are on and the collector's programs are measured")
	settle         = flag.Duration("settle", 6*time.Second, "time from a server's start to its load's, in every variant (a tokenwire variant also waits until the collector has probed the server)")
	bystanderPort  = flag.Int("bystander-port", 18099, "the port a bystander variant's collector watches instead of the server's (nothing listens there)")
	twinPort       = flag.Int("twin-port", 18002, "the twin variant's second Go server's port on 127.0.0.1")
	repeats        = flag.Int("repeats", 5, "repeats (variant order rotates each repeat)")
	variantsFlag   = flag.String("variants", strings.Join(variantNames(), ","), "variants to run: stack/observer")
	idleConns      = flag.Int("idle-conns", 10000, "open streams for the memory measurement; 0: skip")
	outDir         = flag.String("outdir", "bench/results", "where the results files go")
)

func main() {
	benchutil.Main("overhead", func() error {
		err := orchestrate()
		if err != nil {
			select {
			case <-interrupted:
				time.Sleep(2 * teststack.DefaultGrace) // the handler is exiting
			default:
			}
		}
		return err
	}, map[string]func([]string) error{"server": runServer, "load": runLoad, "pyload": runPyLoad, "idle": runIdle})
}

type env struct {
	self, tmp string
	coll      benchutil.Collector
	logs      *os.File
	procs     *teststack.Group
}

func (e *env) serverAddr(stack string) string { return loopback(e.serverPort(stack)) }

func loopback(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

func (e *env) serverPort(stack string) int {
	if stack == "python" {
		return *pyPort
	}
	return *port
}

func orchestrate() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (the collector loads BPF programs)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := collectorFlags.Check(); err != nil {
		return err
	}
	res, err := benchutil.OpenResults(*outDir, "overhead")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "tw-overhead-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	e := &env{self: self, tmp: tmp, coll: collectorFlags.Collector(tmp)}
	if e.logs, err = os.Create(filepath.Join(tmp, "children.log")); err != nil {
		return err
	}
	defer e.logs.Close()
	e.procs = &teststack.Group{}
	defer e.procs.StopAll()
	// bpf stats add two clock reads to every run of every program, which
	// a user does not pay: they are on only in each tokenwire variant's
	// stats window, never in a CPU window, so the sysctl that would keep
	// them on must be off.
	if on, err := os.ReadFile(benchutil.BPFStatsSysctl); err != nil {
		return err
	} else if strings.TrimSpace(string(on)) != "0" {
		return fmt.Errorf("%s is on: the servers' CPU would include the stats' own cost; turn it off (sysctl kernel.bpf_stats_enabled=0)", benchutil.BPFStatsSysctl)
	}
	e.handleSignals()

	variants := strings.Split(*variantsFlag, ",")
	twins := false
	for _, v := range variants {
		_, obs, ok := splitVariant(v)
		if !ok {
			return fmt.Errorf("-variants: %q is none of %s", v, strings.Join(variantNames(), ", "))
		}
		twins = twins || obs.twin
	}
	if *bystanderPort == *port || *bystanderPort == *pyPort || (twins && *bystanderPort == *twinPort) {
		return fmt.Errorf("-bystander-port %d is a server's port: a bystander's collector must watch another", *bystanderPort)
	}
	if twins && (*twinPort == *port || *twinPort == *pyPort) {
		return fmt.Errorf("-twin-port %d is another server's port", *twinPort)
	}
	var rows []row
	for r := range *repeats {
		// Rotate the order each repeat so no variant always runs first
		// (cold caches) or right after another's teardown.
		for k := range variants {
			v := variants[(k+r)%len(variants)]
			fmt.Fprintf(os.Stderr, "overhead: repeat %d/%d, %s, %d streams\n", r+1, *repeats, v, *streams)
			rw, err := e.runVariant(v, *streams, *duration, r+1)
			if err != nil {
				e.dumpLogs()
				return fmt.Errorf("%s (repeat %d): %w", v, r+1, err)
			}
			rw.Repeat = r + 1
			rows = append(rows, rw)
			printRow(rw)
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
	if err := writeResults(res, rows, mem, variants); err != nil {
		return err
	}
	return res.WriteMeta(map[string]string{
		"streams": strconv.Itoa(*streams), "repeats": strconv.Itoa(*repeats), "window": duration.String(), "warmup": warmup.String(), "stats_window": statsWindow.String(),
		"go_interval": interval.String(), "go_chunks": strconv.Itoa(*chunks), "py_interval": pyInterval.String(), "py_chunks": strconv.Itoa(*pyChunks),
		"config": collectorFlags.Config(), "idle_conns": strconv.Itoa(*idleConns), "settle": settle.String(),
	})
}

// collectorKind is which collector, if any, runs beside a variant's
// server.
type collectorKind int

const (
	noCollector collectorKind = iota
	// otlpCollector is the collector binary with an otlp receiver in
	// place of tokenwire: no BPF program.
	otlpCollector
	// tokenwireCollector is the collector with the default pipeline.
	tokenwireCollector
)

// observer is what runs beside a variant's server; a variant is
// stack/observer.
type observer struct {
	name      string
	stacks    []string // the stacks it is a variant of
	collector collectorKind
	// watchesServer: the tokenwire collector tracks streams on the
	// server's port; otherwise on -bystander-port, where nothing listens.
	watchesServer bool
	// instrumented: the server records its chunks with the OpenTelemetry
	// Go SDK and exports them to the collector.
	instrumented bool
	// twin: an identical server under an identical load runs beside the
	// watched one, unwatched.
	twin bool
}

var bothStacks = []string{"go", "python"}

// observers are every variant's observer, in the order -variants'
// default and its error message list them.
var observers = []observer{
	{name: "baseline", stacks: bothStacks},
	{name: "tokenwire", stacks: bothStacks, collector: tokenwireCollector, watchesServer: true},
	{name: "interceptor", stacks: []string{"go"}, collector: otlpCollector, instrumented: true},
	{name: "bystander", stacks: bothStacks, collector: tokenwireCollector},
	{name: "idle", stacks: bothStacks, collector: otlpCollector},
	{name: "twin", stacks: []string{"go"}, collector: tokenwireCollector, watchesServer: true, twin: true},
	{name: "twin-unwatched", stacks: []string{"go"}, collector: tokenwireCollector, twin: true},
}

// splitVariant splits "go/tokenwire" into its stack and observer.
func splitVariant(v string) (stack string, obs observer, ok bool) {
	stack, name, _ := strings.Cut(v, "/")
	for _, o := range observers {
		if o.name == name && slices.Contains(o.stacks, stack) {
			return stack, o, true
		}
	}
	return "", observer{}, false
}

// variantNames lists every variant, stack by stack, in observers' order.
func variantNames() []string {
	var names []string
	for _, stack := range bothStacks {
		for _, o := range observers {
			if slices.Contains(o.stacks, stack) {
				names = append(names, stack+"/"+o.name)
			}
		}
	}
	return names
}

// interrupted is closed when SIGINT, SIGTERM or SIGHUP arrived; the
// handler then stops the children and exits.
var interrupted = make(chan struct{})

// handleSignals stops every child (so no collector keeps its programs
// attached and no server keeps its port) and removes the temporary
// directory, then exits 130; the kernel turns bpf stats off when their
// descriptor closes with the process.
func (e *env) handleSignals() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		close(interrupted)
		fmt.Fprintf(os.Stderr, "overhead: %v: stopping child processes\n", s)
		e.procs.StopAll()
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

func printRow(r row) {
	fmt.Fprintf(os.Stderr, "  %-18s chunks=%d (%.0f/s) errors=%d latency p50=%.3fms p99=%.3fms server=%.3f cores coll=%.3f load=%.3f others=%.2f bpf=%.0fns/chunk srvRSS=%.1fMiB\n",
		r.Variant, r.Load.Chunks, float64(r.Load.Chunks)/r.Window, r.Load.Errors, at(r.Load.LatencyMs, 0), at(r.Load.LatencyMs, 2),
		r.cores(r.ServerCPU), r.cores(r.CollectorCPU), r.cores(r.LoadCPU), r.Host.OthersCores, float64(r.BPFRunNs)/float64(max(r.Load.StatsChunks, 1)), mib(r.ServerMem.RSS))
	if r.Load.FirstError != "" {
		fmt.Fprintf(os.Stderr, "  first load error: %s\n", r.Load.FirstError)
	}
	if r.Twin.Port != 0 {
		fmt.Fprintf(os.Stderr, "  %-18s server :%d, twin :%d (twin started first: %t) chunks=%d errors=%d server=%.3f cores; CPU per chunk server/twin - 1 = %+.1f%%\n",
			"", r.ServerPort, r.Twin.Port, r.TwinFirst, r.Twin.Load.Chunks, r.Twin.Load.Errors, r.cores(r.Twin.ServerCPU),
			100*((r.ServerCPU/float64(max(r.Load.Chunks, 1)))/(r.Twin.ServerCPU/float64(max(r.Twin.Load.Chunks, 1)))-1))
		if r.Twin.Load.FirstError != "" {
			fmt.Fprintf(os.Stderr, "  twin's first load error: %s\n", r.Twin.Load.FirstError)
		}
	}
}

func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
