// Command streams measures the stream probe on this machine: how close its
// TTFT and chunk intervals are to what the server and the client measured,
// and what it costs in the kernel per event and per chunk, beside empty
// programs on the same hooks.
//
// It needs root. Traffic stays on 127.0.0.1; every loop is bounded.
//
//	go run ./bench/streams -streams 50 -chunks 50 -interval 20ms -think 50ms
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

var (
	nStreams = flag.Int("streams", 50, "concurrent streams per round")
	nChunks  = flag.Int("chunks", 50, "events per stream")
	interval = flag.Duration("interval", 20*time.Millisecond, "time between events")
	think    = flag.Duration("think", 50*time.Millisecond, "time before the first event")
	rounds   = flag.Int("rounds", 3, "cost rounds (tokenwire and floor, interleaved)")
	out      = flag.String("out", "", "also write the report to this file")
)

// newServer is an SSE server that records, per stream (by its id query
// parameter), when it started answering and when each event's flush
// returned.
func newServer() *teststack.SSEServer {
	return &teststack.SSEServer{Think: *think, Interval: *interval, Events: *nChunks,
		Event: func(i int) string { return fmt.Sprintf("data: {\"token\":%d}\n\n", i) }}
}

// client runs one stream and returns when each event arrived, relative to
// the request being sent.
func client(addr, id string) (sent time.Time, arrivals []time.Time, err error) {
	conn, err := net.Dial("tcp4", addr)
	if err != nil {
		return sent, nil, err
	}
	defer conn.Close()
	sent = time.Now()
	fmt.Fprintf(conn, "GET /stream?id=%s HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n", id)
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return sent, arrivals, nil
			}
			return sent, arrivals, err
		}
		if strings.Contains(line, "data: ") {
			arrivals = append(arrivals, time.Now())
		}
	}
}

func runLoad(addr string, round int) error {
	var wg sync.WaitGroup
	errs := make(chan error, *nStreams)
	for i := range *nStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := client(addr, fmt.Sprintf("r%d-%d", round, i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func openTracer(port uint16, chunkRecords bool) (*stream.Tracer, error) {
	return stream.Open(stream.Config{
		Ports: []uint16{port}, MaxSockets: 16384, RingBufferBytes: 8 << 20,
		HookOrder: hook.DefaultOrder, Coalesce: 500 * time.Microsecond,
		FlushInterval: time.Second, ChunkRecords: chunkRecords, GapBounds: stream.DefaultGapBounds,
	})
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "streams bench:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	srv := newServer()
	hs, err := teststack.StartHTTP("", srv)
	if err != nil {
		return err
	}
	defer hs.Close()
	addr, port := hs.Addr, uint16(hs.Port)

	var report strings.Builder
	var uts unix.Utsname
	unix.Uname(&uts)
	fmt.Fprintf(&report, "# Stream probe: accuracy and cost\n\n%s, kernel %s, %d streams x %d chunks, %v apart, think %v\n\n",
		time.Now().UTC().Format(time.RFC3339), unix.ByteSliceToString(uts.Release[:]), *nStreams, *nChunks, *interval, *think)
	fmt.Fprintf(&report, "command: go run ./bench/streams %s\n\n", strings.Join(os.Args[1:], " "))

	if err := accuracy(addr, port, srv, &report); err != nil {
		return err
	}
	if err := cost(addr, port, &report); err != nil {
		return err
	}
	fmt.Print(report.String())
	if *out != "" {
		return os.WriteFile(*out, []byte(report.String()), 0o644)
	}
	return nil
}

// accuracy runs one round with per-chunk records and compares each
// stream's kernel timings with the server's and the client's.
func accuracy(addr string, port uint16, srv *teststack.SSEServer, report *strings.Builder) error {
	tr, err := openTracer(port, true)
	if err != nil {
		return err
	}
	defer tr.Close()
	type kstream struct {
		reqTS, firstTS uint64
		chunks         []uint64
		reqID          string
		headerLen      int
	}
	var mu sync.Mutex
	streams := map[stream.ID]*kstream{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rec stream.Record
		for tr.Read(&rec) == nil {
			mu.Lock()
			k := streams[rec.ID]
			if k == nil {
				k = &kstream{}
				streams[rec.ID] = k
			}
			switch rec.Kind {
			case stream.KindRequest:
				if _, after, ok := strings.Cut(string(rec.Data), "id="); ok {
					k.reqID, _, _ = strings.Cut(after, " ")
				}
			case stream.KindResponse:
				k.headerLen = strings.Index(string(rec.Data), "\r\n\r\n") + 4
			case stream.KindProgress:
				if k.firstTS == 0 && rec.Stats.FirstChunkTS != 0 {
					// As the receiver does: a head write that carried the
					// first event is the first chunk.
					k.reqTS, k.firstTS = rec.Stats.RequestTS, rec.Stats.FirstChunkTS
					if rec.Stats.HeadBody(k.headerLen) > 0 {
						k.firstTS = rec.Stats.HeadersTS
						k.chunks = append(k.chunks, rec.Stats.HeadersTS)
					}
					k.chunks = append(k.chunks, rec.Stats.FirstChunkTS)
				}
			case stream.KindChunk:
				k.chunks = append(k.chunks, rec.Stats.LastChunkTS)
			}
			mu.Unlock()
		}
	}()

	type client struct {
		sent     time.Time
		arrivals []time.Time
	}
	clients := map[string]client{}
	var cmu sync.Mutex
	var wg sync.WaitGroup
	for i := range *nStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("acc-%d", i)
			sent, arr, err := clientRun(addr, id)
			if err == nil {
				cmu.Lock()
				clients[id] = client{sent, arr}
				cmu.Unlock()
			}
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	tr.Close()
	<-done

	var ttftVsServer, ttftVsClient, gapVsServer []float64
	matched := 0
	for _, k := range streams {
		st, ok := srv.ByID(k.reqID)
		c, cok := clients[k.reqID]
		if k.reqID == "" || !ok || !cok || k.firstTS == 0 {
			continue
		}
		matched++
		kttft := time.Duration(k.firstTS - k.reqTS)
		ttftVsServer = append(ttftVsServer, float64((kttft-st.First().Sub(st.Start)).Abs())/1e6)
		if len(c.arrivals) > 0 {
			ttftVsClient = append(ttftVsClient, float64((kttft-c.arrivals[0].Sub(c.sent)).Abs())/1e6)
		}
		for i := 1; i < len(k.chunks) && i < len(st.Flushed); i++ {
			kg := time.Duration(k.chunks[i] - k.chunks[i-1])
			sg := st.Flushed[i].Sub(st.Flushed[i-1])
			gapVsServer = append(gapVsServer, float64((kg-sg).Abs())/1e6)
		}
	}
	fmt.Fprintf(report, "## Accuracy (%d of %d streams matched)\n\n| error of tokenwire's value, ms | p50 | p99 | max | n |\n| --- | --- | --- | --- | --- |\n", matched, *nStreams)
	for _, row := range []struct {
		name string
		v    []float64
	}{
		{"TTFT vs server (handler start -> first write returned)", ttftVsServer},
		{"TTFT vs client (request sent -> first event read)", ttftVsClient},
		{"chunk interval vs server (between write returns)", gapVsServer},
	} {
		fmt.Fprintf(report, "| %s | %.3f | %.3f | %.3f | %d |\n", row.name, benchutil.Percentile(row.v, 0.5), benchutil.Percentile(row.v, 0.99), benchutil.Percentile(row.v, 1), len(row.v))
	}
	report.WriteString("\n")
	return nil
}

func clientRun(addr, id string) (time.Time, []time.Time, error) { return client(addr, id) }

// cost measures run time per event of the stream programs and of empty
// programs on the same hooks, in interleaved rounds under the same load.
func cost(addr string, port uint16, report *strings.Builder) error {
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enabling BPF stats: %w", err)
	}
	defer stats.Close()
	type sample struct{ ns, runs float64 }
	real := map[string][]sample{}
	floor := map[string][]sample{}
	chunksTotal := 0.0
	var perChunk, floorPerChunk []float64
	for round := range *rounds {
		// tokenwire
		tr, err := openTracer(port, false)
		if err != nil {
			return err
		}
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			var rec stream.Record
			for tr.Read(&rec) == nil {
			}
		}()
		if err := runLoad(addr, 2*round); err != nil {
			tr.Close()
			return err
		}
		var roundNS float64
		for name, progs := range tr.Programs() {
			var sm sample
			for _, p := range progs {
				s, err := p.Stats()
				if err != nil {
					tr.Close()
					return err
				}
				sm.ns += float64(s.Runtime.Nanoseconds())
				sm.runs += float64(s.RunCount)
			}
			real[name] = append(real[name], sm)
			roundNS += sm.ns
		}
		tr.Close()
		<-drained
		chunks := float64(*nStreams * *nChunks)
		chunksTotal += chunks
		perChunk = append(perChunk, roundNS/chunks)

		// floor
		var objs floorObjects
		if err := loadFloorObjects(&objs, nil); err != nil {
			return err
		}
		progs := map[string]*ebpf.Program{
			"sk_data_ready": objs.TwFlReady, "sock_recv_length": objs.TwFlRecv,
			"sock_send_length": objs.TwFlSent, "inet_sock_set_state": objs.TwFlState,
		}
		var links []link.Link
		for name, p := range progs {
			if _, ok := real[name]; !ok {
				continue // a hook point the probe did not need on this kernel
			}
			l, err := link.AttachTracing(link.TracingOptions{Program: p})
			if err != nil {
				objs.Close()
				return err
			}
			links = append(links, l)
		}
		err = runLoad(addr, 2*round+1)
		var floorNS float64
		for name, p := range progs {
			if _, ok := real[name]; !ok {
				continue
			}
			if s, serr := p.Stats(); serr == nil {
				floor[name] = append(floor[name], sample{float64(s.Runtime.Nanoseconds()), float64(s.RunCount)})
				floorNS += float64(s.Runtime.Nanoseconds())
			}
		}
		floorPerChunk = append(floorPerChunk, floorNS/chunks)
		for _, l := range links {
			l.Close()
		}
		objs.Close()
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(report, "## Kernel cost (bpf stats, %d interleaved rounds, median of per-round ns per run)\n\n", *rounds)
	report.WriteString("| hook point | tokenwire ns/run | empty program ns/run | runs per round | target 2x floor + 100 ns |\n| --- | --- | --- | --- | --- |\n")
	names := make([]string, 0, len(real))
	for n := range real {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		med := func(ss []sample) (float64, float64) {
			var per, runs []float64
			for _, s := range ss {
				if s.runs > 0 {
					per = append(per, s.ns/s.runs)
					runs = append(runs, s.runs)
				}
			}
			return benchutil.Percentile(per, 0.5), benchutil.Percentile(runs, 0.5)
		}
		r, runs := med(real[n])
		f, _ := med(floor[n])
		verdict := "met"
		if r > 2*f+100 {
			verdict = fmt.Sprintf("missed by %.0f ns", r-(2*f+100))
		}
		fmt.Fprintf(report, "| %s | %.0f | %.0f | %.0f | %s |\n", n, r, f, runs, verdict)
	}
	fmt.Fprintf(report, "\nAll stream programs together: %.0f ns of kernel time per chunk (median over rounds; includes the request, response and close events of each stream); empty programs on the same hooks: %.0f ns.\n",
		benchutil.Percentile(perChunk, 0.5), benchutil.Percentile(floorPerChunk, 0.5))
	return nil
}
