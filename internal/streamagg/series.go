package streamagg

import (
	"cmp"
	"slices"
	"time"

	"github.com/tokenwire/tokenwire/internal/histogram"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// Histogram bounds, in seconds. Time to first token and request duration
// follow the semantic conventions' advice for gen_ai.server.* ; the chunk
// interval uses the advice for gen_ai.server.time_per_output_token with
// three finer buckets below 10 ms (fast token streams), which the kernel
// counts into itself (stream.DefaultGapBounds).
var (
	TTFTBounds     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	DurationBounds = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	IntervalBounds = secondsOf(stream.DefaultGapBounds)
)

func secondsOf(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// Mode says how a stream was read: its HTTP heads parsed, or its bytes
// opaque (TLS, HTTP/2, any other protocol).
type Mode uint8

// Modes.
const (
	ModeOpaque Mode = iota
	ModeHTTP
)

func (m Mode) String() string {
	if m == ModeHTTP {
		return "http"
	}
	return "opaque"
}

// SeriesKey is one attribute set of the stream metrics, under one process.
// The overflow series (beyond Config.MaxSeries) has PID 0, port 0 and
// OtherValue for method, route and model.
type SeriesKey struct {
	PID                  uint32
	Port                 uint16
	Method, Route, Model string
	Mode                 Mode
}

// Series holds one attribute set's cumulative totals.
type Series struct {
	TTFT, Duration, Interval *histogram.Histogram
	Chunks, Bytes            int64
	// Process is the process that wrote the series' first stream, read
	// when the series was made: its resource stays the same whatever
	// holds the pid later. Running is false when it had exited by then.
	Process procinfo.Process
	Running bool

	lastUpdate time.Duration // since Aggregator.base
}

func newSeries() *Series {
	return &Series{
		TTFT:     histogram.New(len(TTFTBounds)),
		Duration: histogram.New(len(DurationBounds)),
		Interval: histogram.New(len(IntervalBounds)),
	}
}

// seriesOf returns the series of o's key, making it; beyond MaxSeries new
// keys go to the overflow series of their mode.
func (a *Aggregator) seriesOf(o *openStream) *Series {
	if ser := a.series[o.key]; ser != nil {
		return ser
	}
	if len(a.series) >= a.cfg.MaxSeries {
		a.cfg.OnOverflow()
		o.key = SeriesKey{Method: OtherValue, Route: OtherValue, Model: OtherValue, Mode: o.key.Mode}
		if ser := a.series[o.key]; ser != nil {
			return ser
		}
	}
	ser := newSeries()
	if o.key.PID != 0 {
		ser.Process, ser.Running = a.procs.Describe(o.key.PID, a.comm(&o.comm))
	}
	a.series[o.key] = ser
	return ser
}

// ExpireSeries drops the series whose process has exited and that no
// stream updated for SeriesExpiry. It returns how many it dropped.
func (a *Aggregator) ExpireSeries(now time.Time) int {
	if a.cfg.SeriesExpiry <= 0 {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	before := now.Add(-a.cfg.SeriesExpiry).Sub(a.base)
	n := 0
	for k, s := range a.series {
		if s.lastUpdate < before && (!s.Running || !a.procs.Running(s.Process)) {
			delete(a.series, k)
			n++
		}
	}
	return n
}

// SeriesSnapshot is a copy of one series as of Snapshot.
type SeriesSnapshot struct {
	Key SeriesKey
	Series
}

// Snapshot copies every series, ordered by process then attributes, so
// that the receiver can translate them while records keep arriving.
func (a *Aggregator) Snapshot() []SeriesSnapshot {
	a.mu.Lock()
	out := make([]SeriesSnapshot, 0, len(a.series))
	for k, s := range a.series {
		out = append(out, SeriesSnapshot{Key: k, Series: Series{
			TTFT: s.TTFT.Clone(), Duration: s.Duration.Clone(), Interval: s.Interval.Clone(),
			Chunks: s.Chunks, Bytes: s.Bytes, Process: s.Process, Running: s.Running,
		}})
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y SeriesSnapshot) int { return x.Key.compare(y.Key) })
	return out
}

func (k SeriesKey) compare(o SeriesKey) int {
	return cmp.Or(cmp.Compare(k.PID, o.PID), cmp.Compare(k.Port, o.Port), cmp.Compare(k.Method, o.Method),
		cmp.Compare(k.Route, o.Route), cmp.Compare(k.Model, o.Model), cmp.Compare(k.Mode, o.Mode))
}

// count adds what the kernel counted since the stream's previous record.
func (a *Aggregator) count(o *openStream, rec *stream.Record, end bool) {
	st := &rec.Stats
	if !o.classified {
		a.classify(o, st)
	}
	if o.skip != "" {
		return
	}
	ser := o.ser
	if ser == nil {
		ser = a.seriesOf(o)
		o.ser = ser
	}
	ser.lastUpdate = time.Since(a.base)
	if st.Chunks < o.seenChunks || st.Bytes < o.seenBytes || st.GapSum < o.seenGapSum {
		// The kernel's totals went back: not this stream's any more (its
		// state was reset). What it reports from now on is all new.
		o.seenChunks, o.seenBytes, o.seenGapSum = 0, 0, 0
	}
	// A head write that carried body bytes is the stream's first chunk:
	// the kernel counts chunks from the next write on.
	if !o.headCounted && st.HeadBytes != 0 {
		o.headCounted = true
		if o.headBody = st.HeadBody(o.headerLen); o.headBody > 0 {
			ser.Chunks++
			ser.Bytes += int64(o.headBody)
		}
	}
	if o.headBody > 0 && o.headGap == 0 && st.FirstChunkTS != 0 {
		o.headGap = st.FirstChunkTS - st.HeadersTS
		ser.Interval.Observe(IntervalBounds, seconds(o.headGap))
	}
	if first := o.firstChunkTS(st); !o.ttftDone && first != 0 {
		o.ttftDone = true
		ser.TTFT.Observe(TTFTBounds, seconds(first-st.RequestTS))
	}
	ser.Interval.AddCounts(st.GapCounts[:], seconds(st.GapSum-o.seenGapSum))
	ser.Chunks += int64(st.Chunks - o.seenChunks)
	ser.Bytes += int64(st.Bytes - o.seenBytes)
	o.seenGapSum, o.seenChunks, o.seenBytes = st.GapSum, st.Chunks, st.Bytes
	if end {
		ser.Duration.Observe(DurationBounds, seconds(st.EndTS-st.RequestTS))
		if a.cfg.Spans {
			a.span(o, rec)
		}
	}
}

// firstChunkTS is when the first body bytes were written: with the head
// when it carried body, else the kernel's first chunk.
func (o *openStream) firstChunkTS(st *stream.Stats) uint64 {
	if o.headBody > 0 {
		return st.HeadersTS
	}
	return st.FirstChunkTS
}

func seconds(ns uint64) float64 { return float64(ns) / 1e9 }
