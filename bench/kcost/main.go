// Command kcost measures what tokenwire's BPF programs cost per delivered
// chunk: all the programs the collector holds (by their IDs, from the
// collector's file descriptors: never another process's programs), with
// the collector running the default pipeline (config.yaml, stream tracking
// on the benchmark server's port), against empty programs on the same
// hooks (bench-only, floor.bpf.c) measured in the same run under the
// same load, and the write program rebuilt in cumulative steps
// (parts.bpf.c, benchutil.WriteSteps), each step alone on the hook in a
// mode of its own. Rounds alternate the modes, each load in each round,
// orders rotating.
//
// Loads:
//   - dense: the Go SSE server (teststack.SSEServer), -dense-streams loops
//     each streaming -dense-chunks events -dense-interval apart, one
//     connection per stream, with realistic ~180-byte OpenAI chunks;
//   - sparse: the Python stack vLLM serves with (uvicorn + starlette,
//     teststack's server) and -sparse-streams clients that send chat
//     completions as the official openai SDK does (keep-alive), events
//     -sparse-interval apart;
//   - tls: the sparse load over TLS, measured with the TLS uprobes (mode
//     tokenwire) and without them (mode notls: timed from record headers),
//     with the server process's CPU time beside the programs' (a uprobe's
//     trap is not in bpf stats); and as a bystander (mode bystander: the
//     shared libssl probed system-wide, the server's port not watched, so
//     its calls trap into uprobes that do not read them);
//   - gotls: the dense load's Go server over TLS in a child process (the
//     serve-tls subcommand), Go clients on keep-alive connections,
//     measured with the TLS uprobes on its crypto/tls and without them.
//
// With -base-collector, the dense and sparse loads also run mode base:
// another build of the collector (another commit's, bench/run.sh's
// BENCH_BASE) with the same config, next to mode tokenwire in every
// round, so that a change
// to the programs shows as a difference paired by round rather than
// between two runs, which this host's drift from one run to the next
// can swamp.
//
// Per program it writes run count and run time (kernel bpf stats, turned
// on through a BPF_ENABLE_STATS descriptor: off again when this process
// ends) and the chunks the clients received, to kcost.csv.
//
// Needs root and the built collector (make build). Traffic stays on
// 127.0.0.1; every load is bounded by -duration.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

var (
	collectorFlags = benchutil.RegisterCollectorFlags()
	rounds         = flag.Int("rounds", 3, "rounds; each runs every load with tokenwire and with the floor")
	duration       = flag.Duration("duration", 10*time.Second, "load time per load, mode and round")
	denseStreams   = flag.Int("dense-streams", 20, "dense: concurrent stream loops")
	denseChunks    = flag.Int("dense-chunks", 300, "dense: events per stream")
	denseInterval  = flag.Duration("dense-interval", 2*time.Millisecond, "dense: time between events")
	sparseStreams  = flag.Int("sparse-streams", 8, "sparse: concurrent SDK-client loops")
	sparseChunks   = flag.Int("sparse-chunks", 40, "sparse: events per stream")
	sparseIntv     = flag.Duration("sparse-interval", 100*time.Millisecond, "sparse: time between events")
	goTLSStreams   = flag.Int("gotls-streams", 20, "gotls: concurrent client loops, one keep-alive connection each")
	goTLSChunks    = flag.Int("gotls-chunks", 100, "gotls: events per stream")
	goTLSIntv      = flag.Duration("gotls-interval", 10*time.Millisecond, "gotls: time between events")
	idle           = flag.Duration("idle", 2*time.Second, "idle window before and after each load (the host's background runs)")
	loadsFlag      = flag.String("loads", "dense,sparse,tls,gotls", "loads to run")
	modesFlag      = flag.String("modes", "", "modes to run (comma-separated); empty: every mode of each load")
	outDir         = flag.String("outdir", "bench/results", "where kcost.csv goes")
	baseCollector  = flag.String("base-collector", "", "another build of the collector, run as mode base on the dense and sparse loads (empty: no mode base)")
	baseLabel      = flag.String("base-label", "", "what -base-collector was built from (a commit), for the report")
)

func main() { benchutil.Main("kcost", run, map[string]func([]string) error{"serve-tls": serveTLS}) }

// sample is one program's runs over one load.
type sample struct {
	round                int
	load, mode, prog     string
	id                   uint32
	hook                 string
	runs, ns             uint64
	chunks, streams      int
	bytes                int64
	seconds, others, bsy float64
	idleRuns, idleNs     uint64 // in the idle windows around the load
	idleSecs             float64
	serverCPU            float64 // the server process's CPU seconds over the load; -1: not measured
	// tailsFromUser is the collector's write_tails_from_user over the
	// load: body writes whose last bytes its programs read from the
	// server's memory; -1 in the modes without the collector.
	tailsFromUser float64
}

func run() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root")
	}
	if err := collectorFlags.Check(); err != nil {
		return err
	}
	if *baseCollector != "" {
		if _, err := os.Stat(*baseCollector); err != nil {
			return fmt.Errorf("-base-collector: %w", err)
		}
		if *baseLabel == "" {
			return errors.New("-base-collector needs -base-label (what it was built from)")
		}
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	res, err := benchutil.OpenResults(*outDir, "kcost")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "tw-kcost-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	logs, err := os.Create(tmp + "/children.log")
	if err != nil {
		return err
	}
	defer logs.Close()
	g := &teststack.Group{}
	defer g.StopAll()
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		return fmt.Errorf("enable bpf stats: %w", err)
	}
	defer stats.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "kcost: %v: stopping child processes\n", s)
		g.StopAll()
		stats.Close()
		os.RemoveAll(tmp)
		os.Exit(130)
	}()

	loads, err := startLoads(tmp)
	if err != nil {
		return err
	}
	defer func() {
		for _, l := range loads {
			l.stop()
		}
	}()
	coll := collectorFlags.Collector(tmp)
	var samples []sample
	for r := range *rounds {
		for k := range loads {
			l := loads[(k+r)%len(loads)]
			for _, mode := range l.roundModes(r) {
				if *modesFlag != "" && !slices.Contains(strings.Split(*modesFlag, ","), mode) {
					continue
				}
				fmt.Fprintf(os.Stderr, "kcost: round %d/%d, %s, %s\n", r+1, *rounds, l.name, mode)
				ss, err := measure(g, coll, l, mode, logs)
				if err != nil {
					b, _ := os.ReadFile(logs.Name())
					os.Stderr.Write(b[max(0, len(b)-4000):])
					return fmt.Errorf("%s %s round %d: %w", l.name, mode, r+1, err)
				}
				for i := range ss {
					ss[i].round = r + 1
					s := ss[i]
					fmt.Fprintf(os.Stderr, "  %-17s %-20s runs/chunk %.2f ns/run %.0f ns/chunk %.0f\n", s.prog, s.hook,
						float64(s.runs)/float64(max(s.chunks, 1)), float64(s.ns)/float64(max(s.runs, 1)), float64(s.ns)/float64(max(s.chunks, 1)))
				}
				samples = append(samples, ss...)
			}
		}
	}
	var rows [][]string
	for _, s := range samples {
		rows = append(rows, []string{strconv.Itoa(s.round), s.load, s.mode, s.prog, strconv.Itoa(int(s.id)), s.hook,
			strconv.FormatUint(s.runs, 10), strconv.FormatUint(s.ns, 10), strconv.Itoa(s.chunks), strconv.Itoa(s.streams),
			strconv.FormatInt(s.bytes, 10), fmt.Sprintf("%.3f", s.seconds), fmt.Sprintf("%.3f", s.bsy), fmt.Sprintf("%.3f", s.others),
			strconv.FormatUint(s.idleRuns, 10), strconv.FormatUint(s.idleNs, 10), fmt.Sprintf("%.3f", s.idleSecs),
			fmt.Sprintf("%.4f", s.serverCPU), strconv.FormatFloat(s.tailsFromUser, 'f', -1, 64)})
	}
	if err := res.WriteCSV("kcost.csv", []string{"round", "load", "mode", "program", "prog_id", "hook", "run_cnt", "run_ns",
		"chunks", "streams", "chunk_bytes", "seconds", "host_busy_cores", "others_cores",
		"idle_run_cnt", "idle_run_ns", "idle_seconds", "server_cpu_seconds", "tails_from_user"}, rows); err != nil {
		return err
	}
	params := map[string]string{"rounds": strconv.Itoa(*rounds), "duration": duration.String(), "idle": idle.String()}
	for _, l := range loads {
		params[l.name] = l.describe
	}
	if *baseCollector != "" {
		params["base"] = *baseLabel
	}
	return res.WriteMeta(params)
}

// tailsFromUserMetric counts the body writes whose last bytes the
// collector's programs read from the writer's memory where they read the
// kernel's copy (internal/stream, Counters.TailFromUser).
const tailsFromUserMetric = "otelcol_receiver_tokenwire_write_tails_from_user"

// noDetails is the overlay of mode nodetails: the default pipeline with
// response bodies kept in the kernel, so that the difference from mode
// tokenwire is what GenAI response details cost.
const noDetails = `receivers:
  tokenwire:
    streams:
      response_details: false
`

// noSlots is the overlay of mode noslots: the default pipeline with every
// connection's state in socket storage, so that the difference from mode
// tokenwire is what the state slots save the real programs.
const noSlots = `receivers:
  tokenwire:
    streams:
      state_slots: 0
`

// noTLS is the overlay of mode notls: the default pipeline without the TLS
// uprobes, so that TLS streams are timed from record headers and the
// difference from mode tokenwire is what reading their plaintext costs.
const noTLS = `receivers:
  tokenwire:
    streams:
      tls:
        enabled: false
`

// bystander is the overlay of mode bystander: the shared libssl probed for
// every process (streams.tls.system_wide) while the server's port is not
// watched (port 9, where nothing listens): what system-wide uprobes cost a
// process whose calls nobody asked to read.
func bystander() (string, error) {
	lib, err := teststack.SharedLibSSL()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`receivers:
  tokenwire:
    streams:
      ports: [9]
      tls:
        system_wide: [%s]
`, lib), nil
}

// measure runs one load with tokenwire's collector (mode tokenwire;
// nodetails without response details; noslots without the state slots;
// notls without the TLS uprobes;
// bystander with system-wide ones that do not read the server;
// base with -base-collector, the same config), with
// the floor programs attached (floor) or one of the write program's parts
// (step-*), and returns each program's runs and
// run time over the load.
func measure(g *teststack.Group, coll benchutil.Collector, l *load, mode string, logs *os.File) ([]sample, error) {
	var before func() (map[uint32]benchutil.ProgStat, error)
	tails := func() (float64, error) { return -1, nil }
	switch mode {
	case "tokenwire", "nodetails", "noslots", "notls", "bystander", "base":
		coll.Overlay = map[string]string{"nodetails": noDetails, "noslots": noSlots, "notls": noTLS}[mode]
		if mode == "base" {
			coll.Bin = *baseCollector
		}
		if mode == "bystander" {
			var err error
			if coll.Overlay, err = bystander(); err != nil {
				return nil, err
			}
		}
		p, err := coll.Start(g, l.port, false, logs)
		if err != nil {
			return nil, err
		}
		defer p.Stop()
		before = func() (map[uint32]benchutil.ProgStat, error) { return byID(benchutil.Programs(p.Pid())) }
		if mode != "base" { // another commit's collector may not have the metric
			tails = func() (float64, error) { return coll.Telemetry(tailsFromUserMetric) }
		}
	default:
		attach := attachFloor
		for _, st := range benchutil.WriteSteps[1:] {
			if st.Mode == mode {
				attach = func() (*benchProgs, error) { return attachPart(st, uint16(l.port)) }
			}
		}
		f, err := attach()
		if err != nil {
			return nil, err
		}
		defer f.close()
		before = func() (map[uint32]benchutil.ProgStat, error) { return byID(f.stats()) }
	}
	// Every program runs for every socket on the host, other tenants'
	// included: idle windows just before and after the load (no benchmark
	// traffic) measure that background, which the report subtracts.
	i0, err := before()
	if err != nil {
		return nil, err
	}
	time.Sleep(*idle)
	s0, err := before()
	if err != nil {
		return nil, err
	}
	tails0, err := tails()
	if err != nil {
		return nil, err
	}
	host := benchutil.StartHost()
	cpu0 := serverCPU(l)
	t0 := time.Now()
	lr, err := l.run(*duration)
	if err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	cpu := serverCPU(l) - cpu0
	if l.serverPid == 0 {
		cpu = -1
	}
	hl := host.Stop()
	s1, err := before()
	if err != nil {
		return nil, err
	}
	tails1, err := tails()
	if err != nil {
		return nil, err
	}
	tailsFromUser := tails1 - tails0
	if tails0 < 0 {
		tailsFromUser = -1
	}
	time.Sleep(*idle)
	i1, err := before()
	if err != nil {
		return nil, err
	}
	var out []sample
	for id, b := range s1 {
		a := s0[id]
		idleRuns := (s0[id].RunCnt - i0[id].RunCnt) + (i1[id].RunCnt - b.RunCnt)
		idleNs := (s0[id].RunNs - i0[id].RunNs) + (i1[id].RunNs - b.RunNs)
		out = append(out, sample{load: l.name, mode: mode, prog: b.Name, id: id, hook: hookOf(b.Name),
			runs: b.RunCnt - a.RunCnt, ns: b.RunNs - a.RunNs, chunks: lr.chunks, streams: lr.streams, bytes: lr.bytes,
			seconds: secs, bsy: hl.BusyCores, others: hl.OthersCores,
			idleRuns: idleRuns, idleNs: idleNs, idleSecs: 2 * idle.Seconds(), serverCPU: cpu, tailsFromUser: tailsFromUser})
	}
	if lr.chunks == 0 {
		return nil, fmt.Errorf("no chunks delivered (first error: %v)", lr.err)
	}
	return out, nil
}

func byID(ps []benchutil.ProgStat, err error) (map[uint32]benchutil.ProgStat, error) {
	if err != nil {
		return nil, err
	}
	m := map[uint32]benchutil.ProgStat{}
	for _, p := range ps {
		m[p.ID] = p
	}
	return m, nil
}

// serverCPU is the CPU seconds of l's server process so far, to the
// nanosecond (0 when it is this process or cannot be read).
func serverCPU(l *load) float64 {
	if l.serverPid == 0 {
		return 0
	}
	s, err := benchutil.RunSeconds(l.serverPid)
	if err != nil {
		return 0
	}
	return s
}
