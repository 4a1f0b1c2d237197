package streamagg

import (
	"net/netip"

	"github.com/tokenwire/tokenwire/internal/httpsniff"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// Span is one finished stream, for a SERVER span. Times are the kernel's
// monotonic nanoseconds.
type Span struct {
	PID  uint32
	Comm string // the writer's thread name, when the process is gone
	// Start is when the request's last byte reached the socket, End when
	// the stream ended, FirstChunk when its first body bytes were written
	// (0: none).
	Start, End, FirstChunk uint64
	// Method is empty when the stream is opaque; Path is the raw path.
	Method, Path, Model string
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
	isHTTP      bool
	status      int
	path, model string
	traceParent httpsniff.TraceParent
}

// span records a finished stream's span.
func (a *Aggregator) span(o *openStream, rec *stream.Record) {
	st := &rec.Stats
	sp := Span{
		PID: o.pid, Comm: a.comm(&o.comm),
		Start: st.RequestTS, End: st.EndTS, FirstChunk: o.firstChunkTS(st),
		Method: o.key.Method, Path: o.span.path, Model: o.span.model,
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

// Process returns what procinfo knows of pid (comm names it when the
// process is gone), for resources.
func (a *Aggregator) Process(pid uint32, comm string) (executable, containerID string) {
	info := a.procs.Lookup(pid, comm)
	return info.Executable, info.ContainerID
}
