package streamagg

import (
	"cmp"
	"slices"
	"time"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/histogram"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// Histogram bounds. Time to first token, request duration, time per
// output token (s) and token usage ({token}) take the semantic
// conventions' advice (genai); the chunk interval (s) takes the advice for
// gen_ai.server.time_per_output_token with three finer buckets below
// 10 ms (fast token streams), which the kernel counts into itself
// (stream.DefaultGapBounds).
var (
	TTFTBounds = genai.ServerTimeToFirstTokenBuckets
	// TTFCBounds are a client call's time to first chunk's
	// (gen_ai.client.operation.time_to_first_chunk).
	TTFCBounds     = genai.ClientOperationDurationBuckets
	DurationBounds = genai.ServerRequestDurationBuckets
	TPOTBounds     = genai.ServerTimePerOutputTokenBuckets
	TokenBounds    = genai.ClientTokenUsageBuckets
	IntervalBounds = secondsOf(stream.DefaultGapBounds)
)

func secondsOf(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// Mode says how a stream was read: its HTTP heads parsed (from the
// socket, or from a TLS library's plaintext), or its bytes opaque (TLS no
// uprobe reads, HTTP/2, any other protocol).
type Mode uint8

// Modes.
const (
	ModeOpaque Mode = iota
	ModeHTTP
	ModeTLS // HTTP/1.x over TLS, its plaintext read through uprobes
)

func (m Mode) String() string {
	switch m {
	case ModeHTTP:
		return "http"
	case ModeTLS:
		return "tls"
	}
	return "opaque"
}

// overTLS is the mode of a stream read as m whose kernel stats say it was
// TLS read as plaintext: its HTTP is then tls.
func (m Mode) overTLS(st *stream.Stats) Mode {
	if m == ModeHTTP && st.TLS() {
		return ModeTLS
	}
	return m
}

// SeriesKey is one attribute set of the stream metrics, under one process,
// fixed when the stream is classified (at its first chunk): what the
// request and the response's first body said by then. The overflow series
// (beyond Config.MaxSeries) has PID 0, port 0, OtherMethod for method,
// OtherValue for route and model, and nothing else.
type SeriesKey struct {
	PID                  uint32
	Port                 uint16
	Method, Route, Model string
	Mode                 Mode
	// Operation (gen_ai.operation.name) and Provider
	// (gen_ai.provider.name) are "" when unknown; ResponseModel when the
	// first body did not name one.
	Operation, Provider, ResponseModel string
	// Format is the response's wire format; FormatUnknown in opaque mode
	// too.
	Format genai.Format
	// Client: the series of client calls (Port is the server's port,
	// ServerAddress its address; Method and Route are empty).
	Client        bool
	ServerAddress string
}

// Series holds one attribute set's cumulative totals.
type Series struct {
	// TTFT and Interval take every stream; Duration the streams that did
	// not end in an error, Errors those that did, by error.type.
	TTFT, Duration, Interval *histogram.Histogram
	Errors                   []ErrorDuration
	// TPOT (time per output token) and the token counts take only the
	// streams that reported them as final (see genai.Response.Ended).
	TPOT                      *histogram.Histogram
	InputTokens, OutputTokens *histogram.Histogram
	Chunks, Bytes             int64
	// Process is the process that wrote the series' first stream, read
	// when the series was made: its resource stays the same whatever
	// holds the pid later. Running is false when it had exited by then.
	Process procinfo.Process
	Running bool

	lastUpdate time.Duration // since Aggregator.base
}

// ErrorDuration is the request durations of the streams of one series that
// ended in one error.type.
type ErrorDuration struct {
	Type     string
	Duration *histogram.Histogram
}

// newSeries returns empty totals; a client series' TTFT takes TTFCBounds.
func newSeries(client bool) *Series {
	return &Series{
		TTFT:         histogram.New(len(ttftBounds(client))),
		Duration:     histogram.New(len(DurationBounds)),
		Interval:     histogram.New(len(IntervalBounds)),
		TPOT:         histogram.New(len(TPOTBounds)),
		InputTokens:  histogram.New(len(TokenBounds)),
		OutputTokens: histogram.New(len(TokenBounds)),
	}
}

// errorDuration returns the series' duration histogram for errType,
// making it (error types are capped: few per series).
func (s *Series) errorDuration(errType string) *histogram.Histogram {
	for i := range s.Errors {
		if s.Errors[i].Type == errType {
			return s.Errors[i].Duration
		}
	}
	h := histogram.New(len(DurationBounds))
	s.Errors = append(s.Errors, ErrorDuration{Type: errType, Duration: h})
	return h
}

// seriesOf returns the series of o's key, making it; beyond MaxSeries new
// keys go to the overflow series of their mode and role. o keeps its own
// key: its span reports its own method, port and server.
func (a *Aggregator) seriesOf(o *openStream) *Series {
	key := o.key
	if ser := a.series[key]; ser != nil {
		return ser
	}
	if len(a.series) >= a.cfg.MaxSeries {
		a.cfg.OnOverflow()
		key = SeriesKey{Method: OtherMethod, Route: OtherValue, Model: OtherValue, Mode: key.Mode, Client: key.Client}
		if ser := a.series[key]; ser != nil {
			return ser
		}
	}
	ser := newSeries(key.Client)
	if key.PID != 0 {
		ser.Process, ser.Running = a.procs.Describe(key.PID, a.comm(&o.comm))
	}
	a.series[key] = ser
	return ser
}

// ExpireSeries drops the series whose process has exited and that no
// stream updated for SeriesExpiry. It returns how many it dropped. The
// overflow series belong to no process and stay: one dropped and made
// again would restart its cumulative totals under the same start time.
func (a *Aggregator) ExpireSeries(now time.Time) int {
	if a.cfg.SeriesExpiry <= 0 {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	before := now.Add(-a.cfg.SeriesExpiry).Sub(a.base)
	n := 0
	for k, s := range a.series {
		if k.PID != 0 && s.lastUpdate < before && (!s.Running || !a.procs.Running(s.Process)) {
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
		errs := make([]ErrorDuration, len(s.Errors))
		for i, e := range s.Errors {
			errs[i] = ErrorDuration{Type: e.Type, Duration: e.Duration.Clone()}
		}
		out = append(out, SeriesSnapshot{Key: k, Series: Series{
			TTFT: s.TTFT.Clone(), Duration: s.Duration.Clone(), Interval: s.Interval.Clone(), Errors: errs,
			TPOT: s.TPOT.Clone(), InputTokens: s.InputTokens.Clone(), OutputTokens: s.OutputTokens.Clone(),
			Chunks: s.Chunks, Bytes: s.Bytes, Process: s.Process, Running: s.Running,
		}})
	}
	a.mu.Unlock()
	slices.SortFunc(out, func(x, y SeriesSnapshot) int { return x.Key.compare(y.Key) })
	return out
}

func (k SeriesKey) compare(o SeriesKey) int {
	return cmp.Or(cmp.Compare(k.PID, o.PID), cmp.Compare(k.Port, o.Port), cmp.Compare(k.Method, o.Method),
		cmp.Compare(k.Route, o.Route), cmp.Compare(k.Model, o.Model), cmp.Compare(k.Mode, o.Mode),
		cmp.Compare(k.Operation, o.Operation), cmp.Compare(k.Provider, o.Provider),
		cmp.Compare(k.ResponseModel, o.ResponseModel), cmp.Compare(k.Format, o.Format),
		compareBool(k.Client, o.Client), cmp.Compare(k.ServerAddress, o.ServerAddress))
}

// count adds what the kernel counted since the stream's previous record.
func (a *Aggregator) count(o *openStream, rec *stream.Record, end bool) {
	st := &rec.Stats
	if !o.classified {
		a.classify(o, st)
		o.key.Mode = o.key.Mode.overTLS(st)
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
	// the kernel counts chunks from the next write on, and joins writes
	// closer than Coalesce into one chunk, so a first chunk that close
	// after the head is part of it. A stats record with the head's bytes
	// but no chunk is the stream's end.
	if !o.headCounted && st.HeadBytes != 0 {
		o.headCounted = true
		if o.headBody = st.HeadBody(o.headerLen); o.headBody > 0 {
			o.headChunk = st.FirstChunkTS == 0 || st.FirstChunkTS-st.HeadersTS >= uint64(a.cfg.Coalesce)
			if o.headChunk {
				ser.Chunks++
			}
			ser.Bytes += int64(o.headBody)
		}
	}
	if o.headChunk && o.headGap == 0 && st.FirstChunkTS != 0 {
		o.headGap = st.FirstChunkTS - st.HeadersTS
		ser.Interval.Observe(IntervalBounds, seconds(o.headGap))
	}
	if first := o.firstChunkTS(st); !o.ttftDone && first != 0 {
		o.ttftDone = true
		ser.TTFT.Observe(ttftBounds(o.key.Client), seconds(first-st.RequestTS))
	}
	ser.Interval.AddCounts(st.GapCounts[:], seconds(st.GapSum-o.seenGapSum))
	ser.Chunks += int64(st.Chunks - o.seenChunks)
	ser.Bytes += int64(st.Bytes - o.seenBytes)
	o.seenGapSum, o.seenChunks, o.seenBytes = st.GapSum, st.Chunks, st.Bytes
	if end {
		st.EndTS = responseEnd(o.key.Mode, rec.Reason, st)
		a.atEnd(o, ser, st)
		if a.cfg.Spans {
			a.span(o, rec)
		}
	}
}

// atEnd records what is known of a stream only at its end: its duration
// (by error.type when it ended in an error), and the output tokens, input
// tokens and time per output token it reported as final. A count the
// stream did not report, or reported without saying it was over (a
// running total), is not recorded: never guessed.
func (a *Aggregator) atEnd(o *openStream, ser *Series, st *stream.Stats) {
	dur := seconds(st.EndTS - st.RequestTS)
	errType := a.errorType(o)
	if errType == "" {
		ser.Duration.Observe(DurationBounds, dur)
	} else {
		ser.errorDuration(errType).Observe(DurationBounds, dur)
	}
	if !o.gen.Ended() {
		return
	}
	u := &o.gen.Usage
	if u.Input.Known {
		ser.InputTokens.Observe(TokenBounds, float64(u.Input.N))
	}
	if !u.Output.Known {
		return
	}
	ser.OutputTokens.Observe(TokenBounds, float64(u.Output.N))
	// The conventions count time per output token for successful
	// responses only.
	if first := o.firstChunkTS(st); first != 0 && errType == "" {
		if v, ok := genai.TimePerOutputToken(seconds(first-st.RequestTS), dur, u.Output); ok {
			ser.TPOT.Observe(TPOTBounds, v)
		}
	}
}

// responseEnd is when a stream ended for its duration and span: at its
// response's last byte, where the kernel's end came after the response
// may have been complete. A stream on a keep-alive connection ends at the
// connection's next request or at its close, perhaps long after its last
// write (a pooled client's think time, a keep-alive timeout): its last
// write ends it there, as the idle timeout's end does and as
// gen_ai.server.request.duration (time to last byte) counts. In http and
// tls modes the client's close before the terminator is a hang-up in mid
// stream and keeps the time of the client's FIN; an opaque stream has no
// terminator to tell a hang-up from a close after the end, so its last
// write ends it there too.
func responseEnd(mode Mode, reason stream.EndReason, st *stream.Stats) uint64 {
	switch reason {
	case stream.EndNextRequest, stream.EndClose:
	case stream.EndClientClosed:
		if mode != ModeOpaque {
			return st.EndTS
		}
	default:
		return st.EndTS
	}
	last := lastWrite(st)
	if last < st.RequestTS || last > st.EndTS {
		return st.EndTS
	}
	return last
}

// lastWrite is when a stream's response was last written: its last
// chunk's (first) write, or its head's when no chunk came.
func lastWrite(st *stream.Stats) uint64 { return max(st.LastChunkTS, st.HeadersTS) }

// firstChunkTS is when the first body bytes were written: with the head
// when it carried body, else the kernel's first chunk.
func (o *openStream) firstChunkTS(st *stream.Stats) uint64 {
	if o.headBody > 0 {
		return st.HeadersTS
	}
	return st.FirstChunkTS
}

func seconds(ns uint64) float64 { return float64(ns) / 1e9 }
