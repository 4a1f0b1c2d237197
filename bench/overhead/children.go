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

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

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

	var inst *interceptor
	if *otlp != "" {
		var err error
		if inst, err = newInterceptor(*otlp, *export); err != nil {
			return err
		}
		defer inst.shutdown()
	}
	ln, err := net.Listen("tcp4", *addr)
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(*addr)
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		n = min(max(n, 1), 100000)
		t0 := time.Now()
		var rec *streamRecorder
		if inst != nil {
			rec = inst.begin(r, port, t0)
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
				return
			}
			fl.Flush()
			if rec != nil {
				rec.chunk(len(buf))
			}
		}
		if rec != nil {
			rec.end()
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

// interceptor is what a user-space APM middleware does: per stream and per
// chunk it records TTFT, the chunk interval, chunks and bytes with the
// OpenTelemetry Go SDK, which exports them over OTLP/gRPC.
type interceptor struct {
	mp                  *sdkmetric.MeterProvider
	ttft, interval, dur metric.Float64Histogram
	chunks, bytes       metric.Int64Counter
}

func newInterceptor(endpoint string, every time.Duration) (*interceptor, error) {
	exp, err := otlpmetricgrpc.New(context.Background(),
		otlpmetricgrpc.WithEndpoint(endpoint), otlpmetricgrpc.WithInsecure())
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(
		sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(every))))
	m := mp.Meter("bench/interceptor")
	// The semconv advised buckets for TTFT, as tokenwire uses.
	ttftB := []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	gapB := []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	in := &interceptor{mp: mp}
	if in.ttft, err = m.Float64Histogram("gen_ai.server.time_to_first_token", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(ttftB...)); err != nil {
		return nil, err
	}
	if in.interval, err = m.Float64Histogram("tokenwire.stream.chunk.interval", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(gapB...)); err != nil {
		return nil, err
	}
	if in.dur, err = m.Float64Histogram("gen_ai.server.request.duration", metric.WithUnit("s")); err != nil {
		return nil, err
	}
	if in.chunks, err = m.Int64Counter("tokenwire.stream.chunks", metric.WithUnit("{chunk}")); err != nil {
		return nil, err
	}
	if in.bytes, err = m.Int64Counter("tokenwire.stream.bytes", metric.WithUnit("By")); err != nil {
		return nil, err
	}
	return in, nil
}

func (in *interceptor) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	in.mp.Shutdown(ctx)
}

type streamRecorder struct {
	in          *interceptor
	start, last time.Time
	n           int
	attrs       metric.MeasurementOption
}

func (in *interceptor) begin(r *http.Request, port string, t0 time.Time) *streamRecorder {
	p, _ := strconv.Atoi(port)
	// The attributes tokenwire puts on the same metrics.
	return &streamRecorder{in: in, start: t0, last: t0, attrs: metric.WithAttributes(
		attribute.Int("server.port", p),
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.String("tokenwire.stream.mode", "sse"),
	)}
}

func (s *streamRecorder) chunk(size int) {
	now := time.Now()
	ctx := context.Background()
	if s.n == 0 {
		s.in.ttft.Record(ctx, now.Sub(s.start).Seconds(), s.attrs)
	} else {
		s.in.interval.Record(ctx, now.Sub(s.last).Seconds(), s.attrs)
	}
	s.in.chunks.Add(ctx, 1, s.attrs)
	s.in.bytes.Add(ctx, int64(size), s.attrs)
	s.n++
	s.last = now
}

func (s *streamRecorder) end() {
	s.in.dur.Record(context.Background(), time.Since(s.start).Seconds(), s.attrs)
}

// ---------------------------------------------------------------- load

// loadResult is what the load generator reports (JSON on its -out file).
type loadResult struct {
	Streams    int       `json:"streams"`
	Completed  int       `json:"completed"`
	Errors     int       `json:"errors"`
	FirstError string    `json:"first_error,omitempty"`
	Chunks     int       `json:"chunks"`     // events that arrived inside the window
	WindowSec  float64   `json:"window_sec"` // the measured window
	LatencyMs  []float64 `json:"latency_ms"` // p50, p90, p99, p99.9, max of chunk delivery latency
	TTFTMs     []float64 `json:"ttft_ms"`    // p50, p99 of client-side TTFT (request sent -> first event)
	Hist       []uint64  `json:"hist"`       // chunk latency histogram, histBounds buckets
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
// the next, until warmup+duration has passed. Chunk latency is the arrival
// time minus the time the server scheduled the event for (same host, same
// clock); only events arriving inside the window after the warm-up count.
func runLoad(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:18000", "server address")
	streams := fs.Int("streams", 500, "concurrent streams")
	chunks := fs.Int("chunks", 200, "events per stream")
	interval := fs.Duration("interval", 10*time.Millisecond, "the server's event interval (for the start stagger)")
	warmup := fs.Duration("warmup", 3*time.Second, "time before the measured window")
	duration := fs.Duration("duration", 20*time.Second, "measured window")
	out := fs.String("out", "", "write the JSON result here")
	fs.Parse(args)
	if err := benchutil.RaiseNofile(12000); err != nil {
		return err
	}
	start := time.Now()
	from, to := start.Add(*warmup), start.Add(*warmup+*duration)
	from, to = from.Add(0), to.Add(0)
	fromN, toN := from.UnixNano(), to.UnixNano()
	bounds := histBounds()

	type worker struct {
		lat       []float64
		ttft      []float64
		hist      []uint64
		completed int
		errs      int
		firstErr  string
	}
	ws := make([]*worker, *streams)
	var wg sync.WaitGroup
	var chunksIn atomic.Int64
	streamLen := time.Duration(*chunks) * *interval
	for i := range ws {
		w := &worker{hist: make([]uint64, len(bounds)+1)}
		ws[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the starts over one stream length so that streams do
			// not all begin (and end) in the same millisecond.
			time.Sleep(time.Duration(rand.Int64N(int64(max(streamLen, time.Millisecond)))))
			br := bufio.NewReaderSize(nil, 4096)
			for time.Now().Before(to) {
				err := oneStream(*addr, *chunks, br, func(sent time.Time, first bool, now int64, sched int64) {
					if first && now >= fromN && now < toN {
						w.ttft = append(w.ttft, float64(now-sent.UnixNano())/1e6)
					}
					if now < fromN || now >= toN {
						return
					}
					us := float64(now-sched) / 1e3
					w.lat = append(w.lat, us/1e3)
					w.hist[histIndex(bounds, us)]++
					chunksIn.Add(1)
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

	res := loadResult{Streams: *streams, WindowSec: duration.Seconds(), Hist: make([]uint64, len(bounds)+1)}
	var lat, ttft []float64
	for _, w := range ws {
		lat = append(lat, w.lat...)
		ttft = append(ttft, w.ttft...)
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
	if *out != "" {
		return os.WriteFile(*out, b, 0o644)
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
