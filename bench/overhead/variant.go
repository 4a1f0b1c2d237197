package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// row is one variant in one repeat.
type row struct {
	Repeat       int
	Variant      string // stack/observer
	Streams      int
	Load         loadResult
	ServerCPU    float64 // CPU seconds (utime+stime, all threads) in the window
	CollectorCPU float64
	LoadCPU      float64
	ServerMem    benchutil.Mem // at the end of the window
	CollectorMem benchutil.Mem
	// BPFRunNs, BPFRunCnt and BPFByProg are the collector's programs (only
	// its own) in the stats window, which precedes the CPU window: bpf
	// stats cost every program run two clock reads, so they are off while
	// CPU is measured.
	BPFRunNs    uint64
	BPFRunCnt   uint64
	BPFByProg   map[string]progRun // by program name
	Window      float64            // nominal window, seconds: chunks count inside it
	CPUWindow   float64            // measured time between the CPU snapshots, seconds
	StatsWindow float64            // nominal stats window, seconds (0: none); Load.StatsChunks count inside it
	Host        benchutil.HostLoad // the host during the window
	Exported    exported           // what the collector's debug exporter saw, whole run
	// ServerPort is the row's server's port: the one the collector
	// watches in the variants that watch the server.
	ServerPort int
	// Twin is a twin variant's second, unwatched server: its port, CPU
	// seconds in the window and load (zero in other variants); the row's
	// other server figures are the row's server's (watched in twin, not
	// in twin-unwatched).
	Twin twinResult
	// TwinFirst says the twin was started before the row's server
	// (twinFirst).
	TwinFirst bool
	// ProbeCPU and ProbeWait are the tokenwire collector's CPU seconds and
	// the seconds from the server's start until the collector reported its
	// TLS library probed: the one-time cost of a new server, kept out of
	// the window.
	ProbeCPU, ProbeWait float64
}

// twinResult is the twin variant's unwatched server in the window.
type twinResult struct {
	Port      int
	ServerCPU float64
	LoadCPU   float64
	Load      loadResult
}

// progRun is one BPF program's run time and run count.
type progRun struct{ Ns, Cnt uint64 }

// snapshot is the cumulative CPU counters at one instant.
type snapshot struct {
	at                      time.Time
	server, collector, load float64
}

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
	}
	return s, nil
}

// programRuns reads the run time and count of the programs the collector
// holds (by ID: others on the host are not ours to count), by name.
func programRuns(collector *teststack.Proc) (map[string]progRun, error) {
	ps, err := benchutil.Programs(collector.Pid())
	if err != nil {
		return nil, fmt.Errorf("collector's BPF programs: %w", err)
	}
	by := map[string]progRun{}
	for _, p := range ps {
		r := by[p.Name]
		by[p.Name] = progRun{r.Ns + p.RunNs, r.Cnt + p.RunCnt}
	}
	return by, nil
}

// bpfDiff is the collector's programs' runs between two readings. A
// count that went down means a program was replaced between them, which
// fails the run rather than turning into a wrapped-around number.
func bpfDiff(rw *row, before, after map[string]progRun) error {
	rw.BPFByProg = map[string]progRun{}
	for name, r := range after {
		b := before[name]
		if r.Ns < b.Ns || r.Cnt < b.Cnt {
			return fmt.Errorf("collector's program %s counted fewer runs at the stats window's end than at its start", name)
		}
		d := progRun{r.Ns - b.Ns, r.Cnt - b.Cnt}
		rw.BPFByProg[name] = d
		rw.BPFRunNs += d.Ns
		rw.BPFRunCnt += d.Cnt
	}
	return nil
}

// statsStayedOff fails when the collector's programs are not the ones
// read at the stats window's end or counted runs since: then something
// kept bpf stats on (another holder of BPF_ENABLE_STATS) and the CPU
// window paid for them.
func statsStayedOff(collector *teststack.Proc, then map[string]progRun) error {
	now, err := programRuns(collector)
	if err != nil {
		return err
	}
	if len(now) != len(then) {
		return fmt.Errorf("the collector holds %d programs after the CPU window, %d before it", len(now), len(then))
	}
	for name, r := range now {
		t, ok := then[name]
		if !ok {
			return fmt.Errorf("the collector's program %s appeared during the CPU window", name)
		}
		if r.Cnt != t.Cnt {
			return fmt.Errorf("bpf stats stayed on after the stats window: %s counted runs in the CPU window (%d, then %d; does another process hold BPF_ENABLE_STATS?)", name, t.Cnt, r.Cnt)
		}
	}
	return nil
}

// runVariant runs one variant at nStreams: collector (if any), server,
// load generator (-settle after the server), then after the warm-up a
// stats window and the CPU window, on the same timeline for every variant.
// The load generator gets both windows as absolute times and counts the
// chunks in each. With the tokenwire collector, bpf stats are on in the
// stats window only: the collector's programs are read before it (counters
// stand still while stats are off) and after it, and the CPU counters
// right after the stats go off, so that chunks, CPU and BPF each cover
// their own window. A twin variant starts its second server and load on
// the same timeline and reads their CPU beside the first's; it measures
// no BPF (its programs' runs would mix both servers'). Which of its two
// ports is the row's server's alternates with the repeat, and which
// server starts first every two repeats (twinFirst).
func (e *env) runVariant(variant string, nStreams int, window time.Duration, repeat int) (rw row, err error) {
	stack, obs, _ := splitVariant(variant)
	rw = row{Variant: variant, Streams: nStreams, Window: window.Seconds(), ServerPort: e.serverPort(stack)}
	ports := []int{rw.ServerPort}
	if obs.twin {
		rw.Twin.Port = *twinPort
		if repeat%2 == 0 {
			rw.ServerPort, rw.Twin.Port = rw.Twin.Port, rw.ServerPort
		}
		rw.TwinFirst = twinFirst(repeat)
		ports = append(ports, rw.Twin.Port)
	}
	if err := teststack.WaitPortsFree(ports, 2*time.Minute); err != nil {
		return rw, err
	}
	var coll *teststack.Proc
	if obs.collector != noCollector {
		watched := rw.ServerPort
		if !obs.watchesServer {
			watched = *bystanderPort
		}
		if coll, err = e.coll.Start(e.procs, watched, obs.collector == otlpCollector, e.logs); err != nil {
			return rw, err
		}
		defer func() {
			coll.Stop() // after the server (defers run last first)
			if err != nil {
				fmt.Fprintln(e.logs, coll.Tail(60))
			}
		}()
	}
	var collBefore float64
	if coll != nil {
		if collBefore, err = benchutil.CPUSeconds(coll.Pid()); err != nil {
			return rw, fmt.Errorf("collector CPU: %w", err)
		}
	}
	started := time.Now()
	var srv, twin *teststack.Proc
	defer func() {
		if srv != nil {
			srv.Stop()
		}
		if twin != nil {
			twin.Stop()
		}
	}()
	starts := []func() error{func() (err error) {
		srv, err = e.startServer(stack, rw.ServerPort, obs.instrumented)
		return err
	}}
	if obs.twin {
		startTwin := func() (err error) {
			twin, err = e.startServer(stack, rw.Twin.Port, false)
			return err
		}
		if rw.TwinFirst {
			starts = append([]func() error{startTwin}, starts...)
		} else {
			starts = append(starts, startTwin)
		}
	}
	for _, start := range starts {
		if err := start(); err != nil {
			return rw, err
		}
	}
	if obs.collector == tokenwireCollector && obs.watchesServer {
		// The collector probes a server it has not seen (its TLS library,
		// at its next /proc scan) once, whenever it appears; the window
		// measures streaming through a probed server, and the probe's
		// cost is reported apart.
		if err := waitProbed(coll.LogPath(), srv.Pid(), probeTimeout); err != nil {
			return rw, err
		}
		rw.ProbeWait = time.Since(started).Seconds()
		after, err := benchutil.CPUSeconds(coll.Pid())
		if err != nil {
			return rw, fmt.Errorf("collector CPU: %w", err)
		}
		rw.ProbeCPU = after - collBefore
	}
	time.Sleep(time.Until(started.Add(*settle)))
	resFile := filepath.Join(e.tmp, "load.json")
	twinFile := filepath.Join(e.tmp, "load-twin.json")
	os.Remove(resFile)
	os.Remove(twinFile)
	statsFrom := time.Now().Add(*warmup)
	from := statsFrom.Add(*statsWindow)
	to := from.Add(window)
	loadArgs := func(port int, out string) []string {
		args := []string{"-addr", loopback(port), "-streams", strconv.Itoa(nStreams),
			"-stats-from", strconv.FormatInt(statsFrom.UnixNano(), 10),
			"-from", strconv.FormatInt(from.UnixNano(), 10), "-to", strconv.FormatInt(to.UnixNano(), 10), "-out", out}
		if stack == "python" {
			return append([]string{"pyload", "-chunks", strconv.Itoa(*pyChunks), "-interval", pyInterval.String()}, args...)
		}
		return append([]string{"load", "-chunks", strconv.Itoa(*chunks), "-interval", interval.String()}, args...)
	}
	wait := time.Duration(*chunks)*(*interval)*5 + 60*time.Second
	if stack == "python" {
		wait = time.Duration(*pyChunks)*(*pyInterval)*5 + 60*time.Second
	}
	load, err := e.procs.Start(teststack.ProcOptions{Name: "load", Log: e.logs}, e.self, loadArgs(rw.ServerPort, resFile)...)
	if err != nil {
		return rw, err
	}
	defer load.Stop()
	var twinLoad *teststack.Proc
	if twin != nil {
		if twinLoad, err = e.procs.Start(teststack.ProcOptions{Name: "load-twin", Log: e.logs}, e.self, loadArgs(rw.Twin.Port, twinFile)...); err != nil {
			return rw, err
		}
		defer twinLoad.Stop()
	}
	var before, atStatsEnd map[string]progRun
	if obs.collector == tokenwireCollector && *statsWindow > 0 && !obs.twin {
		rw.StatsWindow = statsWindow.Seconds()
		if before, err = programRuns(coll); err != nil {
			return rw, err
		}
		time.Sleep(time.Until(statsFrom))
		stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			return rw, fmt.Errorf("enable bpf stats: %w", err)
		}
		time.Sleep(time.Until(from))
		// Closing the descriptor turns the stats off before it returns.
		if err := stats.Close(); err != nil {
			return rw, fmt.Errorf("disable bpf stats: %w", err)
		}
	} else {
		time.Sleep(time.Until(from))
	}
	a, err := snap(srv, coll, load)
	if err != nil {
		return rw, err
	}
	var ta snapshot
	if twin != nil {
		if ta, err = snap(twin, nil, twinLoad); err != nil {
			return rw, fmt.Errorf("twin: %w", err)
		}
	}
	if rw.StatsWindow > 0 {
		if atStatsEnd, err = programRuns(coll); err != nil {
			return rw, err
		}
		if err := bpfDiff(&rw, before, atStatsEnd); err != nil {
			return rw, err
		}
	}
	host := benchutil.StartHost()
	time.Sleep(time.Until(to))
	rw.Host = host.Stop()
	b, err := snap(srv, coll, load)
	if err != nil {
		return rw, err
	}
	if twin != nil {
		tb, err := snap(twin, nil, twinLoad)
		if err != nil {
			return rw, fmt.Errorf("twin: %w", err)
		}
		rw.Twin.ServerCPU, rw.Twin.LoadCPU = tb.server-ta.server, tb.load-ta.load
	}
	if rw.ServerMem, err = benchutil.Memory(srv.Pid()); err != nil {
		return rw, fmt.Errorf("server memory: %w", err)
	}
	if coll != nil {
		if rw.CollectorMem, err = benchutil.Memory(coll.Pid()); err != nil {
			return rw, fmt.Errorf("collector memory: %w", err)
		}
	}
	if atStatsEnd != nil {
		if err := statsStayedOff(coll, atStatsEnd); err != nil {
			return rw, err
		}
	}
	rw.CPUWindow = b.at.Sub(a.at).Seconds()
	rw.ServerCPU, rw.CollectorCPU, rw.LoadCPU = b.server-a.server, b.collector-a.collector, b.load-a.load
	// The load generator finishes the streams in flight and exits.
	if err := load.Wait(wait); err != nil {
		return rw, fmt.Errorf("load: %w", err)
	}
	if twinLoad != nil {
		if err := twinLoad.Wait(wait); err != nil {
			return rw, fmt.Errorf("twin's load: %w", err)
		}
		raw, err := os.ReadFile(twinFile)
		if err != nil {
			return rw, err
		}
		if err := json.Unmarshal(raw, &rw.Twin.Load); err != nil {
			return rw, fmt.Errorf("twin's load: %w", err)
		}
	}
	if exited(srv) || (coll != nil && exited(coll)) || (twin != nil && exited(twin)) {
		return rw, errors.New("server or collector exited during the run")
	}
	raw, err := os.ReadFile(resFile)
	if err != nil {
		return rw, err
	}
	if stack == "python" {
		if rw.Load, err = pyLatency(raw, srv, statsFrom, from, to); err != nil {
			return rw, err
		}
	} else if err := json.Unmarshal(raw, &rw.Load); err != nil {
		return rw, err
	}
	// Server first, so that the interceptor flushes its last spans and the
	// tokenwire collector sees the last streams end; then the collector,
	// which flushes its pipelines on the way out.
	srv.Stop()
	if twin != nil {
		twin.Stop()
	}
	if coll != nil {
		coll.Stop()
		if rw.Exported, err = countExported(coll.LogPath()); err != nil {
			return rw, err
		}
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

// startServer starts a variant's server and waits until it is ready: the
// Go SSE server on port (instrumented: with the OpenTelemetry Go SDK) or
// teststack's Python server (uvicorn + starlette, on -py-port).
func (e *env) startServer(stack string, port int, instrumented bool) (*teststack.Proc, error) {
	if stack == "python" {
		dir, err := os.MkdirTemp(e.tmp, "py-")
		if err != nil {
			return nil, err
		}
		s, err := teststack.StartStack(teststack.StackStarlette, teststack.StackOptions{Port: *pyPort, Events: *pyChunks,
			Think: 20 * time.Millisecond, Interval: *pyInterval, Dir: dir})
		if err != nil {
			return nil, err
		}
		e.procs.Adopt(s.Proc)
		return s.Proc, nil
	}
	args := []string{"server", "-addr", loopback(port), "-interval", interval.String()}
	if instrumented {
		args = append(args, "-otlp", e.coll.OTLPEndpoint())
	}
	c, err := e.procs.Start(teststack.ProcOptions{Name: fmt.Sprintf("server:%d", port), Log: e.logs, Lines: true}, e.self, args...)
	if err != nil {
		return nil, err
	}
	if _, err := c.WaitLine(30*time.Second, func(l string) bool { return l == "ready" }); err != nil {
		c.Stop()
		return nil, fmt.Errorf("server did not start: %w", err)
	}
	return c, nil
}

// probeTimeout bounds the wait for the collector to probe a new server:
// its TLS scan runs every 5 s by default.
const probeTimeout = 30 * time.Second

// waitProbed waits until the collector's log at path reports pid's TLS
// library probed.
func waitProbed(path string, pid int, timeout time.Duration) error {
	want := regexp.MustCompile(`TLS library probed.*"pid": ` + strconv.Itoa(pid) + `[,}]`)
	deadline := time.Now().Add(timeout)
	for {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if want.Match(raw) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the collector did not report server %d's TLS library probed within %v (log: %s)", pid, timeout, path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exited reports whether a child has ended.
func exited(p *teststack.Proc) bool {
	done, _ := p.Exited()
	return done
}

// twinFirst says whether a twin variant starts its twin before the row's
// server in the given repeat (counted from 1): in repeats 2, 3, 6, 7, ...
// In pairs, so that across every four repeats each port, and the row's
// server (the watched one in twin), starts first as often as not (3 to 2
// with 5 repeats): the one started first is older when the windows open.
// Flipping with the watched port, every repeat, would always start the
// same port first.
func twinFirst(repeat int) bool {
	return (repeat/2)%2 == 1
}
