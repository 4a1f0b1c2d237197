package main

// The child processes: the SSE server (plain or instrumented with the
// OpenTelemetry Go SDK), the streaming load generator and the idle
// connection holder. Each runs as its own process (the orchestrator
// re-executes this binary with a subcommand), so CPU and memory are
// measured per process.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// ---------------------------------------------------------------- server

// runServer serves /stream?n=N (N SSE events, the first after -think, then
// one every -interval; each event carries the time it was scheduled for)
// and /idle (headers and one event, then a comment every second until the
// client goes away).
func runServer(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18000", "listen address")
	otlp := fs.String("otlp", "", "OTLP/gRPC endpoint: instrument with the OTel Go SDK and export there")
	think := fs.Duration("think", 20*time.Millisecond, "time before the first event")
	interval := fs.Duration("interval", 10*time.Millisecond, "time between events")
	export := fs.Duration("export-interval", 10*time.Second, "OTel SDK export interval (the collector's default collection_interval)")
	fs.Parse(args)
	if err := benchutil.RaiseNofile(12000); err != nil {
		return err
	}

	ln, err := net.Listen("tcp4", *addr)
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	var inst *interceptor
	if *otlp != "" {
		if inst, err = newInterceptor(*otlp, *export, port); err != nil {
			return err
		}
		defer inst.shutdown()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		n = min(max(n, 1), 100000)
		t0 := time.Now()
		var rec *streamRecorder
		if inst != nil {
			rec = inst.begin(r, t0)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		fl := w.(http.Flusher)
		buf := make([]byte, 0, 128)
		for i := range n {
			sched := t0.Add(*think + time.Duration(i)*(*interval))
			if d := time.Until(sched); d > 0 {
				time.Sleep(d)
			}
			buf = append(buf[:0], `data: {"i":`...)
			buf = strconv.AppendInt(buf, int64(i), 10)
			buf = append(buf, `,"t":`...)
			buf = strconv.AppendInt(buf, sched.UnixNano(), 10)
			buf = append(buf, `,"choices":[{"delta":{"content":"tok"}}]}`+"\n\n"...)
			if _, err := w.Write(buf); err != nil {
				if rec != nil {
					rec.end(http.StatusOK, "client_closed")
				}
				return
			}
			fl.Flush()
			if rec != nil {
				rec.chunk(len(buf))
			}
		}
		if rec != nil {
			// The handler's return makes net/http write the terminating
			// chunk: the end tokenwire calls "terminator".
			rec.end(http.StatusOK, "terminator")
		}
	})
	mux.HandleFunc("/idle", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "data: {\"hello\":1}\n\n")
		fl.Flush()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		deadline := time.After(10 * time.Minute)
		for {
			select {
			case <-r.Context().Done():
				return
			case <-deadline:
				return
			case <-t.C:
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
					return
				}
				fl.Flush()
			}
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	return nil
}

// ---------------------------------------------------------------- load

// loadResult is what the load generator reports (JSON on its -out file).
type loadResult struct {
	Streams     int       `json:"streams"`
	Completed   int       `json:"completed"`
	Errors      int       `json:"errors"`
	FirstError  string    `json:"first_error,omitempty"`
	Chunks      int       `json:"chunks"`       // events that arrived inside the window
	StatsChunks int       `json:"stats_chunks"` // events that arrived inside the stats window before it
	WindowSec   float64   `json:"window_sec"`   // the measured window
	LatencyMs   []float64 `json:"latency_ms"`   // p50, p90, p99, p99.9, max of chunk delivery latency
	TTFTMs      []float64 `json:"ttft_ms"`      // p50, p99 of client-side TTFT (request sent -> first event)
	Hist        []uint64  `json:"hist"`         // chunk latency histogram, histBounds buckets
}

// histBounds are the histogram's upper bounds in microseconds: 10 per
// decade from 1 us to 10 s; the last bucket is everything above.
func histBounds() []float64 {
	var b []float64
	for e := 0.0; e <= 7.0001; e += 0.1 {
		b = append(b, math.Pow(10, e))
	}
	return b
}

func histIndex(bounds []float64, us float64) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		m := (lo + hi) / 2
		if us <= bounds[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// runLoad runs -streams concurrent clients; each requests a stream of
// -chunks events, reads it to the end over its own connection and starts
// the next, until -to. Chunk latency is the arrival time minus the time the
// server scheduled the event for (same host, same wall clock); only events
// arriving in [-from, -to) count; events arriving in [-stats-from, -from)
// are counted apart. The windows are given as absolute times by the
// orchestrator, which reads the counters at the same instants.
func runLoad(args []string) error {
	a, err := parseLoad("load", args, loadArgs{addr: "127.0.0.1:18000", streams: 500, chunks: 200, interval: 10 * time.Millisecond}, 12000)
	if err != nil {
		return err
	}
	from, to := a.from, a.to
	statsN, fromN, toN := a.statsFrom.UnixNano(), from.UnixNano(), to.UnixNano()
	window := to.Sub(from)
	bounds := histBounds()

	type worker struct {
		lat         []float64
		ttft        []float64
		hist        []uint64
		statsChunks int
		completed   int
		errs        int
		firstErr    string
	}
	ws := make([]*worker, a.streams)
	var wg sync.WaitGroup
	// Spread the starts over one stream length (at most the warm-up) so
	// that streams do not all begin and end in the same millisecond and
	// the window sees a steady state.
	stagger := min(time.Duration(a.chunks)*a.interval, time.Until(a.statsFrom))
	for i := range ws {
		w := &worker{hist: make([]uint64, len(bounds)+1)}
		ws[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.Int64N(int64(max(stagger, time.Millisecond)))))
			br := bufio.NewReaderSize(nil, 4096)
			for time.Now().Before(to) {
				err := oneStream(a.addr, a.chunks, br, func(sent time.Time, first bool, now int64, sched int64) {
					if first && now >= fromN && now < toN {
						w.ttft = append(w.ttft, float64(now-sent.UnixNano())/1e6)
					}
					if now >= statsN && now < fromN {
						w.statsChunks++
					}
					if now < fromN || now >= toN {
						return
					}
					us := float64(now-sched) / 1e3
					w.lat = append(w.lat, us/1e3)
					w.hist[histIndex(bounds, us)]++
				})
				if err != nil {
					w.errs++
					if w.firstErr == "" {
						w.firstErr = err.Error()
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				w.completed++
			}
		}()
	}
	wg.Wait()

	res := loadResult{Streams: a.streams, WindowSec: window.Seconds(), Hist: make([]uint64, len(bounds)+1)}
	var lat, ttft []float64
	for _, w := range ws {
		lat = append(lat, w.lat...)
		ttft = append(ttft, w.ttft...)
		res.StatsChunks += w.statsChunks
		res.Completed += w.completed
		res.Errors += w.errs
		if res.FirstError == "" {
			res.FirstError = w.firstErr
		}
		for i, c := range w.hist {
			res.Hist[i] += c
		}
	}
	res.Chunks = len(lat)
	res.LatencyMs = []float64{
		benchutil.Percentile(lat, 0.5), benchutil.Percentile(lat, 0.9), benchutil.Percentile(lat, 0.99),
		benchutil.Percentile(lat, 0.999), benchutil.Percentile(lat, 1),
	}
	res.TTFTMs = []float64{benchutil.Percentile(ttft, 0.5), benchutil.Percentile(ttft, 0.99)}
	b, _ := json.Marshal(res)
	if a.out != "" {
		return os.WriteFile(a.out, b, 0o644)
	}
	fmt.Println(string(b))
	return nil
}

var dataPrefix = []byte("data: ")
var tKey = []byte(`"t":`)

// oneStream requests one stream over a new connection and calls event for
// every event with the time the request was sent, whether it is the first,
// the arrival time and the scheduled time (Unix ns).
func oneStream(addr string, chunks int, br *bufio.Reader, event func(sent time.Time, first bool, now, sched int64)) error {
	conn, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Bounded: a stream that stalls for 30 s is an error, not a hang.
	conn.SetDeadline(time.Now().Add(time.Duration(chunks)*100*time.Millisecond + 30*time.Second))
	sent := time.Now()
	if _, err := fmt.Fprintf(conn, "GET /stream?n=%d HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n", chunks); err != nil {
		return err
	}
	br.Reset(conn)
	got := 0
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				if got < chunks {
					return fmt.Errorf("stream ended after %d of %d events", got, chunks)
				}
				return nil
			}
			return err
		}
		if !bytes.HasPrefix(line, dataPrefix) {
			continue
		}
		now := time.Now().UnixNano()
		i := bytes.Index(line, tKey)
		if i < 0 {
			continue
		}
		rest := line[i+len(tKey):]
		j := bytes.IndexByte(rest, ',')
		if j < 0 {
			continue
		}
		sched, err := strconv.ParseInt(string(rest[:j]), 10, 64)
		if err != nil {
			continue
		}
		event(sent, got == 0, now, sched)
		got++
	}
}

// ---------------------------------------------------------------- idle

// runIdle opens -conns connections to /idle, reads their first event,
// prints "connected N" and holds them (reading keep-alive comments) until
// SIGTERM or -hold passes.
func runIdle(args []string) error {
	fs := flag.NewFlagSet("idle", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18000", "server address")
	conns := fs.Int("conns", 10000, "connections")
	hold := fs.Duration("hold", 60*time.Second, "longest time to hold them")
	fs.Parse(args)
	if err := benchutil.RaiseNofile(uint64(*conns) + 1024); err != nil {
		return err
	}
	var open atomic.Int64
	var failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200) // connect at most 200 at a time
	for range *conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			conn, err := net.DialTimeout("tcp4", *addr, 10*time.Second)
			if err != nil {
				failed.Add(1)
				<-sem
				return
			}
			defer conn.Close()
			fmt.Fprint(conn, "GET /idle HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
			br := bufio.NewReaderSize(conn, 512)
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			for {
				line, err := br.ReadSlice('\n')
				if err != nil {
					failed.Add(1)
					<-sem
					return
				}
				if bytes.HasPrefix(line, dataPrefix) {
					break
				}
			}
			open.Add(1)
			<-sem
			conn.SetReadDeadline(time.Time{})
			go io.Copy(io.Discard, conn)
			<-stop
		}()
	}
	for open.Load()+failed.Load() < int64(*conns) {
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("connected %d failed %d\n", open.Load(), failed.Load())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-time.After(*hold):
	}
	close(stop)
	wg.Wait()
	return nil
}
