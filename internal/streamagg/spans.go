package streamagg

import (
	"net/netip"
	"slices"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/httpsniff"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// Span is one finished stream, for a SERVER span. Times are the kernel's
// monotonic nanoseconds.
type Span struct {
	// Process wrote the stream (as its series knows it).
	Process procinfo.Process
	// Start is when the request's last byte reached the socket, End when
	// the stream ended, FirstChunk when its first body bytes were written
	// (0: none).
	Start, End, FirstChunk uint64
	// Method is empty when the stream is opaque; Path is the raw path,
	// Route its template.
	Method, Path, Route, Model string
	// IsHTTP: the response head was HTTP/1.x, with Status.
	IsHTTP bool
	Status int
	Port   uint16
	// Client is the peer, when known (an idle stream that never sent a
	// chunk has none); not set on a client call's span.
	Client      netip.AddrPort
	Mode        Mode
	EndReason   stream.EndReason
	Chunks      int64
	Bytes       int64
	GapMax      uint64 // the longest chunk interval, ns
	TraceParent httpsniff.TraceParent

	// What the request and the whole response said (unlike the metrics,
	// whose attributes are fixed at the first chunk). Model above is the
	// request's. Operation, Provider, ResponseModel, ResponseID and APIType
	// (openai.api.type) are "" when unknown.
	Operation, Provider string
	ResponseModel       string
	ResponseID          string
	APIType             string
	Format              genai.Format
	FinishReasons       []string
	// Usage holds the counts the stream reported as final; the others are
	// not Known.
	Usage genai.Usage
	// Stream is the request body's "stream" flag, when StreamKnown.
	Stream, StreamKnown bool
	// ErrorType is error.type ("" when the stream did not end in an
	// error); Failed says the span's status is an error: the stream
	// reported one, or the status is 5xx (4xx too for a call this host
	// made).
	ErrorType string
	Failed    bool

	// ClientCall: the span of a call this host made (a CLIENT span),
	// to ServerAddress (the Host header, else the server's IP) at Server.
	ClientCall    bool
	ServerAddress string
	Server        netip.AddrPort
}

// spanHead is what a span needs of the heads, read when the stream is
// classified.
type spanHead struct {
	isHTTP             bool
	status             int
	path, route, model string
	traceParent        httpsniff.TraceParent
}

// genAI fills sp's GenAI attributes from what the stream said.
func (a *Aggregator) genAI(sp *Span, o *openStream) {
	g := &o.gen
	sp.Format = g.Format
	sp.Provider = a.provider(sp.Port, g.Format)
	if sp.Method != "" {
		sp.Operation = o.req.Operation()
	}
	sp.APIType = genai.OpenAIAPIType(g.Format, sp.Operation)
	if m := g.Model(); len(m) > 0 {
		sp.ResponseModel = exact(o.key.ResponseModel, m)
	}
	if id := g.ID(); len(id) > 0 {
		sp.ResponseID = string(id)
	}
	sp.FinishReasons = slices.Clone(g.FinishReasons())
	if g.Ended() {
		sp.Usage = g.Usage
	}
	sp.Stream, sp.StreamKnown = o.req.Stream()
	sp.ErrorType = a.errorType(o)
	// The HTTP conventions: a 4xx fails a CLIENT span, not a SERVER one.
	sp.Failed = g.ErrorType() != "" || o.head.Status >= 500 || sp.ClientCall && o.head.Status >= 400
}

// span records a finished stream's span, if there is room for it.
func (a *Aggregator) span(o *openStream, rec *stream.Record) {
	if a.cfg.MaxSpans > 0 && len(a.spans) >= a.cfg.MaxSpans {
		a.cfg.OnSpanDrop()
		return
	}
	st := &rec.Stats
	proc := o.ser.Process
	if proc.PID != o.pid { // the overflow series has no process
		proc, _ = a.procs.Describe(o.pid, a.comm(&o.comm))
	}
	sp := Span{
		Process: proc,
		Start:   st.RequestTS, End: st.EndTS, FirstChunk: o.firstChunkTS(st),
		Method: o.key.Method, Path: o.span.path, Route: o.span.route, Model: o.span.model,
		IsHTTP: o.span.isHTTP, Status: o.span.status,
		Port: o.key.Port, Client: st.Remote, Mode: o.key.Mode, EndReason: rec.Reason,
		Chunks: int64(st.Chunks), Bytes: int64(st.Bytes),
		GapMax:      max(st.GapMax, o.headGap),
		TraceParent: o.span.traceParent,
	}
	if o.key.Client {
		clientSpan(&sp, o, st)
	}
	if o.headChunk {
		sp.Chunks++
	}
	sp.Bytes += int64(o.headBody)
	if o.span.isHTTP {
		a.genAI(&sp, o)
	} else {
		sp.Provider = a.provider(sp.Port, genai.FormatUnknown)
	}
	if n := cap(a.spans); len(a.spans) == n && n >= spanGrowthJump && n < a.cfg.MaxSpans {
		grown := make([]Span, len(a.spans), a.cfg.MaxSpans)
		copy(grown, a.spans)
		a.spans = grown
	}
	a.spans = append(a.spans, sp)
}

// maxSpareSpans bounds the capacity of a buffer handed back to TakeSpans
// that the aggregator keeps when Config.MaxSpans sets no bound: a burst's
// buffer is not held for good.
const maxSpareSpans = 1 << 14

// spanGrowthJump is the capacity from which a span buffer that must grow
// goes straight to Config.MaxSpans: a flood would otherwise have the read
// loop copy megabytes of spans at each doubling while the ring fills, and
// a collector that sees few streams keeps small buffers.
const spanGrowthJump = 1024

// TakeSpans returns the span records gathered since the previous call,
// and gathers the next ones into spare. Handing back the slice the
// previous call returned, as it was returned, once its spans are used,
// spares growing a buffer at every call; nil is always fine.
func (a *Aggregator) TakeSpans(spare []Span) []Span {
	clear(spare) // beyond its length it holds nothing
	if cap(spare) > max(a.cfg.MaxSpans, maxSpareSpans) {
		spare = nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.spans
	a.spans = spare[:0]
	return out
}
