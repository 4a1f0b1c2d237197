// Command pipeline measures the record pipeline's ceiling: how many stream
// records per second the user-space side takes with zero loss when a
// kernel-side producer writes them, where loss starts, and heap
// allocations per record. Stages, each a sweep of producer rates:
//
//   - record-end: ring buffer -> decoded stream.Record (internal/stream's
//     Tracer.Read, the receiver's first stage), END records only;
//   - record: the same with whole streams (REQUEST, RESPONSE, PROGRESS,
//     END: two 576-byte and two 208-byte records per stream);
//   - metrics: whole streams through the receiver's user-space side up to
//     its translation: decode, aggregation (internal/streamagg: the
//     open-stream table, head parsing, caps, series) and the snapshot of
//     every series the receiver takes every -interval, all on the reader
//     thread; the translation of a snapshot into pdata is measured by the
//     receiver's BenchmarkEmission;
//   - spans: as metrics, with one span record per stream, taken every
//     -interval, at most the receiver's default streams.max_pending_spans
//     between takes (the rest are dropped and counted, as the receiver
//     does).
//
// Every stage runs at each ring buffer size in -rings: where loss starts
// depends on the ring's room more than on the reader's per-record cost.
//
// The producer is a bench-only tc program (producer.bpf.c) run with
// BPF_PROG_TEST_RUN repeat; it writes records in the real layouts into the
// real tracer's ring buffer (the map is shared by MapReplacements). The
// producer thread is pinned to one CPU and paced to a target rate; the
// reader thread is pinned to the other. Loss is what the producer could
// not reserve (ring full).
//
// A step up to -retry-up-to records/s whose producer lost nothing but fell
// short of its target (benchutil.ProducerShort: the Go runtime's own
// threads, or the machine, took its CPU) is run again, up to -retries
// times: it measured a lower rate than the step is for. A step that lost
// records is never run again. Every attempt is written, the one the step
// stands on marked as kept.
//
// Needs root.
//
//	go run ./bench/pipeline -rates 500000,1000000,2000000,0 -rings 262144
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/probe"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver"
)

var (
	ratesFlag  = flag.String("rates", "250000,500000,1000000,1500000", "target records/s per step (0: as fast as the producer goes)")
	stagesFlag = flag.String("stages", "metrics,spans", "stages to run (see the package doc)")
	stepDur    = flag.Duration("step", time.Second, "time per step")
	repeats    = flag.Int("repeats", 3, "repeats of every ring size (interleaved: each repeat runs every size)")
	ringsFlag  = flag.String("rings", "262144,1048576,2097152,4194304", "ring buffer sizes in bytes, each a run of every stage (the receiver's default, ring_buffer_size, is 4 MiB)")
	batch      = flag.Int("batch", 256, "records per BPF_PROG_TEST_RUN call (repeat); the producer writes a batch at full speed, so keep it well under the ring's capacity for pacing to mean a rate")
	inflight   = flag.Int("inflight", 9, "whole streams: 2^inflight streams open at once")
	interval   = flag.Duration("interval", time.Second, "metrics/spans stages: how often the reader builds pdata metrics (the receiver's collection_interval; its default is 10s)")
	retries    = flag.Int("retries", 2, "times a step is run again when its producer lost nothing but fell short of its target")
	retryUpTo  = flag.Float64("retry-up-to", 1e6, "steps with targets up to this many records/s are run again when short (the report's verdicts read up to 1M)")
	outDir     = flag.String("outdir", "bench/results", "where pipeline.csv and pipeline.md go")
	memProfile = flag.String("memprofile", "", "write a heap profile of every allocation here (slows the run)")
)

// What the producer patches per stream: a digit of the path (8 paths) and
// of the model (4 models), so the receiver keeps 32 series.
const (
	requestHead = "POST /v1/pX/chat/completions HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\n" +
		"Content-Length: 80\r\n\r\n{\"model\":\"mX\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}"
	responseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)

// stage is one way of handling records on the reader thread.
type stage struct {
	name  string
	whole bool // whole streams rather than END records
	agg   bool // through the receiver's aggregation and pdata
	spans bool
}

var stages = []stage{
	{name: "record-end"},
	{name: "record", whole: true},
	{name: "metrics", whole: true, agg: true},
	{name: "spans", whole: true, agg: true, spans: true},
}

type step struct {
	repeat                   int
	attempt                  int  // 1 for the first run of the step
	kept                     bool // the attempt the step stands on (its last)
	ring                     int  // bytes
	stage                    string
	target                   float64
	produced, lost, consumed uint64
	seconds                  float64
	mallocs                  uint64
	readerNs                 uint64 // reader thread's CPU time
	waitNs                   uint64 // reader thread's time runnable, waiting for its CPU
	builds                   uint64 // pdata metrics built
	spansKept, spansDropped  uint64 // span records taken, and dropped for streams.max_pending_spans
	host                     benchutil.HostLoad
}

func main() { benchutil.Main("pipeline", run, nil) }

func run() error {
	if *memProfile != "" {
		runtime.MemProfileRate = 1
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if runtime.NumCPU() < 2 {
		return errors.New("needs two CPUs: one for the producer, one for the reader")
	}
	var rates []float64
	for _, s := range strings.Split(*ratesFlag, ",") {
		target, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("-rates: %w", err)
		}
		rates = append(rates, target)
	}
	var chosen []stage
	for _, name := range strings.Split(*stagesFlag, ",") {
		i := -1
		for j, st := range stages {
			if st.name == strings.TrimSpace(name) {
				i = j
			}
		}
		if i < 0 {
			return fmt.Errorf("-stages: unknown stage %q", name)
		}
		chosen = append(chosen, stages[i])
	}
	var rings []int
	for _, f := range strings.Split(*ringsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-rings: %w", err)
		}
		rings = append(rings, n)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	runtime.LockOSThread()
	if err := pin(0); err != nil {
		return err
	}
	res, err := benchutil.OpenResults(*outDir, "pipeline")
	if err != nil {
		return err
	}
	var steps []step
	for rep := range *repeats {
		for k := range rings {
			ring := rings[(k+rep)%len(rings)]
			s, err := runRing(ring, chosen, rates)
			if err != nil {
				return err
			}
			for i := range s {
				s[i].repeat = rep + 1
			}
			steps = append(steps, s...)
		}
	}
	return write(res, steps)
}

// runRing runs every stage with a ring buffer of ringBytes: the real
// tracer, the producer writing into its ring, the reader draining it.
func runRing(ringBytes int, chosen []stage, rates []float64) ([]step, error) {
	// The real tracer, watching a port nothing uses: its programs are
	// attached but idle; only the producer writes into its ring.
	tr, err := stream.Open(stream.Config{
		Ports: []uint16{9}, MaxSockets: 1024, StateSlots: stream.DefaultStateSlots, RingBufferBytes: uint32(ringBytes),
		HookOrder: hook.DefaultOrder, Coalesce: 500 * time.Microsecond, FlushInterval: time.Second,
		GapBounds: stream.DefaultGapBounds,
	})
	if err != nil {
		return nil, fmt.Errorf("open stream tracer: %w", err)
	}
	defer tr.Close()
	objs, err := loadProducerIntoRing(ringBytes)
	if err != nil {
		return nil, err
	}
	defer objs.Close()

	r := &reader{tr: tr}
	done := make(chan struct{})
	go r.run(1, done)
	opts := &ebpf.RunOptions{Data: make([]byte, 64), Repeat: uint32(*batch)}
	produce := func() error {
		if _, err := objs.TwBenchProduce.Run(opts); err != nil {
			return fmt.Errorf("test run: %w", err)
		}
		return nil
	}

	var steps []step
	for _, st := range chosen {
		whole := uint32(0)
		if st.whole {
			whole = 1
		}
		if err := objs.WholeStreams.Set(whole); err != nil {
			return nil, err
		}
		var agg *streamagg.Aggregator
		var skipped, evicted atomic.Uint64
		if st.agg {
			var err error
			agg, err = streamagg.New(streamagg.Config{Coalesce: 500 * time.Microsecond, MaxOpen: 16384, MaxPaths: 100, MaxModels: 100,
				Spans: st.spans, MaxSpans: tokenwirereceiver.DefaultMaxPendingSpans,
				OnSkip: func(string) { skipped.Add(1) }, OnEvict: func() { evicted.Add(1) },
				OnSpanDrop: func() { r.spansDropped.Add(1) }}, procinfo.NewCache(4096))
			if err != nil {
				return nil, err
			}
		}
		r.agg.Store(agg)
		// Warm-up, not recorded: the reader's first wake-ups, page faults
		// on the ring's pages, the aggregator's series and interned values.
		for range 200 {
			if err := produce(); err != nil {
				return nil, err
			}
		}
		for _, target := range rates {
			for attempt := 1; ; attempt++ {
				s, err := measure(objs, r, produce, st.name, target)
				if err != nil {
					return nil, err
				}
				s.ring, s.attempt = ringBytes, attempt
				again := attempt <= *retries && target <= *retryUpTo && s.lost == 0 && benchutil.ProducerShort(rate(s.produced, s.seconds), target)
				s.kept = !again
				steps = append(steps, s)
				fmt.Fprintf(os.Stderr, "pipeline: %4d KiB %-10s target %8.0f/s: produced %8.0f/s, lost %d (%.2f%%), read %d, %.4f allocs/record, reader %.0f ns/record, %.0f%% busy, %.1f%% waiting for its CPU\n",
					ringBytes>>10, s.stage, target, rate(s.produced, s.seconds), s.lost, 100*float64(s.lost)/float64(max(s.produced, 1)), s.consumed,
					s.allocsPerRecord(), s.readerNsPerRecord(), s.busy(), s.waiting())
				if !again {
					break
				}
				fmt.Fprintf(os.Stderr, "pipeline: the producer fell short of its target without loss: running the step again\n")
			}
		}
		if skipped.Load()+evicted.Load() > 0 {
			fmt.Fprintf(os.Stderr, "pipeline: %s: %d streams skipped, %d evicted (lost REQUEST/RESPONSE records)\n", st.name, skipped.Load(), evicted.Load())
		}
	}
	r.agg.Store(nil)
	tr.Close()
	<-done
	if r.err != nil {
		return nil, fmt.Errorf("reader: %w", r.err)
	}
	if r.ends.Load() == 0 {
		return nil, errors.New("the reader decoded no END records: the producer's layout does not match")
	}
	return steps, nil
}

// loadProducerIntoRing loads the producer with the tracer's ring buffer in
// place of its own, and the stream heads it writes.
func loadProducerIntoRing(ringBytes int) (*producerObjects, error) {
	ring, err := ownMap("tw_st_events")
	if err != nil {
		return nil, err
	}
	defer ring.Close()
	spec, err := loadProducer()
	if err != nil {
		return nil, err
	}
	spec.Maps["tw_st_events"].MaxEntries = uint32(ringBytes)
	var req, resp [stream.PeekMax]byte
	copy(req[:], requestHead)
	copy(resp[:], responseHead)
	for name, v := range map[string]any{
		"wakeup_bytes": probe.WakeupBytes(uint32(ringBytes)),
		"req_head":     req, "req_len": uint16(len(requestHead)),
		"resp_head": resp, "resp_len": uint16(len(responseHead)),
		"path_digit":  uint32(strings.IndexByte(requestHead, 'X')),
		"model_digit": uint32(strings.LastIndexByte(requestHead, 'X')),
		"shift":       uint32(*inflight),
		"bench_pid":   uint32(os.Getpid()),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("producer variable %s: %w", name, err)
		}
	}
	var objs producerObjects
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"tw_st_events": ring}}); err != nil {
		return nil, fmt.Errorf("load producer: %w", err)
	}
	return &objs, nil
}

// ownMap finds a map this process holds by name.
func ownMap(name string) (*ebpf.Map, error) {
	ms, err := benchutil.Maps(os.Getpid())
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Name == name {
			return ebpf.NewMapFromID(ebpf.MapID(m.ID))
		}
	}
	return nil, fmt.Errorf("map %s not found among this process's maps", name)
}
