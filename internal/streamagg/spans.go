package streamagg

import (
	"net/netip"

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
	// chunk has none).
	Client      netip.AddrPort
	Mode        Mode
	EndReason   stream.EndReason
	Chunks      int64
	Bytes       int64
	GapMax      uint64 // the longest chunk interval, ns
	TraceParent httpsniff.TraceParent
}

// spanHead is what a span needs of the heads, read when the stream is
// classified.
type spanHead struct {
	isHTTP             bool
	status             int
	path, route, model string
	traceParent        httpsniff.TraceParent
}

// span records a finished stream's span.
func (a *Aggregator) span(o *openStream, rec *stream.Record) {
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
	if o.headBody > 0 {
		sp.Chunks++
		sp.Bytes += int64(o.headBody)
	}
	a.spans = append(a.spans, sp)
}

// TakeSpans returns the span records gathered since the previous call.
func (a *Aggregator) TakeSpans() []Span {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.spans
	a.spans = nil
	return out
}
