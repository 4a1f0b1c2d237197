package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg"
)

// reader drains the ring on its own pinned thread, handing records to the
// current stage's aggregator, if any.
type reader struct {
	tr       *stream.Tracer
	tid      atomic.Int64
	consumed atomic.Uint64
	ends     atomic.Uint64
	builds   atomic.Uint64
	// Span records taken and dropped (streams.max_pending_spans) in the
	// spans stage.
	spansKept, spansDropped atomic.Uint64
	agg                     atomic.Pointer[streamagg.Aggregator]
	err                     error
}

func (r *reader) run(cpu int, done chan<- struct{}) {
	defer close(done)
	runtime.LockOSThread()
	if err := pin(cpu); err != nil {
		r.err = err
		return
	}
	r.tid.Store(int64(unix.Gettid()))
	var rec stream.Record
	var cur *streamagg.Aggregator
	var lastBuild time.Time
	var spans []streamagg.Span
	for n := uint64(1); ; n++ {
		if err := r.tr.Read(&rec); err != nil {
			if !errors.Is(err, stream.ErrClosed) {
				r.err = err
			}
			return
		}
		if rec.Kind == stream.KindEnd {
			r.ends.Add(1)
		}
		if a := r.agg.Load(); a != nil {
			if a != cur {
				cur, lastBuild = a, time.Now()
			}
			a.Add(&rec)
			// Checking the clock every 256 records is enough at these rates.
			if n%256 == 0 && time.Since(lastBuild) >= *interval {
				now := time.Now()
				_ = a.Snapshot()
				// As the receiver does: the previous buffer goes back.
				spans = a.TakeSpans(spans)
				r.spansKept.Add(uint64(len(spans)))
				lastBuild = now
				r.builds.Add(1)
			}
		}
		r.consumed.Add(1)
	}
}

// sched is the reader thread's time on CPU and time runnable but waiting
// for a CPU so far, in ns (schedstat).
func (r *reader) sched() (onCPU, waiting uint64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/schedstat", r.tid.Load()))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0
	}
	onCPU, _ = strconv.ParseUint(f[0], 10, 64)
	waiting, _ = strconv.ParseUint(f[1], 10, 64)
	return onCPU, waiting
}

// pin binds the calling (locked) thread to one CPU.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

// measure runs one step: the producer paced to target (0: unpaced) for
// -step, then waits for the reader to catch up.
func measure(objs *producerObjects, r *reader, produce func() error, name string, target float64) (step, error) {
	// Drain what is left, then measure.
	time.Sleep(300 * time.Millisecond)
	var p0, l0 uint64
	if err := objs.Produced.Get(&p0); err != nil {
		return step{}, err
	}
	if err := objs.Lost.Get(&l0); err != nil {
		return step{}, err
	}
	c0, b0 := r.consumed.Load(), r.builds.Load()
	k0, d0 := r.spansKept.Load(), r.spansDropped.Load()
	cpu0, wait0 := r.sched()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	host := benchutil.StartHost()
	start := time.Now()
	end := start.Add(*stepDur)
	n := 0
	for now := time.Now(); now.Before(end); now = time.Now() {
		if target > 0 {
			due := start.Add(time.Duration(float64(n) / target * float64(time.Second)))
			if d := due.Sub(now); d > 0 {
				if d > 200*time.Microsecond {
					time.Sleep(d)
				}
				continue
			}
		}
		if err := produce(); err != nil {
			return step{}, err
		}
		n += *batch
	}
	secs := time.Since(start).Seconds()
	var p1, l1 uint64
	if err := objs.Produced.Get(&p1); err != nil {
		return step{}, err
	}
	if err := objs.Lost.Get(&l1); err != nil {
		return step{}, err
	}
	// Let the reader finish what was produced (it polls on a short timer).
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r.consumed.Load()-c0 >= (p1-p0)-(l1-l0) {
			break
		}
	}
	runtime.ReadMemStats(&ms1)
	cpu1, wait1 := r.sched()
	return step{
		stage: name, target: target, produced: p1 - p0, lost: l1 - l0, consumed: r.consumed.Load() - c0,
		seconds: secs, mallocs: ms1.Mallocs - ms0.Mallocs, readerNs: cpu1 - cpu0, waitNs: wait1 - wait0, builds: r.builds.Load() - b0,
		spansKept: r.spansKept.Load() - k0, spansDropped: r.spansDropped.Load() - d0,
		host: host.Stop(),
	}, nil
}

func (s step) allocsPerRecord() float64 {
	return float64(s.mallocs) / float64(max(s.consumed, 1))
}

func (s step) readerNsPerRecord() float64 {
	return float64(s.readerNs) / float64(max(s.consumed, 1))
}

// busy is the reader thread's CPU use in percent of one core over the
// step (the catch-up after it too, so it can pass 100 slightly).
func (s step) busy() float64 { return 100 * float64(s.readerNs) / (s.seconds * 1e9) }

// waiting is the reader thread's time runnable but not running (another
// thread had its CPU), in percent of the step.
func (s step) waiting() float64 { return 100 * float64(s.waitNs) / (s.seconds * 1e9) }
