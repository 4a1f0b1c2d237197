package tokenwirereceiver

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/streamagg"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// traceData turns span records into one SERVER span each, under their
// process's resource, joining the caller's trace when the request carried
// a traceparent.
func (r *tokenwireReceiver) traceData(spans []streamagg.Span) ptrace.Traces {
	r.wall = r.wallOffset()
	td := ptrace.NewTraces()
	byProcess := map[procinfo.Process]ptrace.SpanSlice{}
	for i := range spans {
		s := &spans[i]
		out, ok := byProcess[s.Process]
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			rs.SetSchemaUrl(genai.SchemaURL)
			r.processResource(s.Process).MoveTo(rs.Resource())
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(metadata.ScopeName)
			ss.Scope().SetVersion(r.set.BuildInfo.Version)
			out = ss.Spans()
			byProcess[s.Process] = out
		}
		r.putSpan(out.AppendEmpty(), s)
	}
	return td
}

func (r *tokenwireReceiver) wallTime(ns uint64) pcommon.Timestamp {
	return pcommon.Timestamp(int64(ns) + r.wall)
}

func (r *tokenwireReceiver) putSpan(sp ptrace.Span, s *streamagg.Span) {
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], rand.Uint64()|1)
	sp.SetSpanID(id)
	switch tp := s.TraceParent; {
	case tp.Valid && r.cfg.Streams.TraceParent == TraceParentParent:
		sp.SetTraceID(tp.TraceID)
		sp.SetParentSpanID(tp.SpanID)
	default:
		var tid [16]byte
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64()|1)
		sp.SetTraceID(tid)
		if tp.Valid && r.cfg.Streams.TraceParent == TraceParentLink {
			l := sp.Links().AppendEmpty()
			l.SetTraceID(tp.TraceID)
			l.SetSpanID(tp.SpanID)
		}
	}
	sp.SetKind(ptrace.SpanKindServer)
	switch {
	case s.ClientCall:
		sp.SetKind(ptrace.SpanKindClient)
		sp.SetName(clientSpanName(s))
	case s.Method != "":
		sp.SetName(s.Method + " " + s.Route)
	default:
		sp.SetName("stream " + strconv.Itoa(int(s.Port)))
	}
	sp.SetStartTimestamp(r.wallTime(s.Start))
	sp.SetEndTimestamp(r.wallTime(s.End))
	a := sp.Attributes()
	a.EnsureCapacity(32) // the most a span gets: grown once, not per attribute
	if s.Method != "" {
		a.PutStr(genai.AttrHTTPRequestMethod, s.Method)
		a.PutStr(genai.AttrURLPath, s.Path)
		a.PutStr(genai.AttrHTTPRoute, s.Route)
	}
	if s.IsHTTP {
		a.PutInt(genai.AttrHTTPResponseStatusCode, int64(s.Status))
	}
	if s.Failed {
		sp.Status().SetCode(ptrace.StatusCodeError)
	}
	a.PutInt(genai.AttrServerPort, int64(s.Port))
	if s.ServerAddress != "" {
		a.PutStr(genai.AttrServerAddress, s.ServerAddress)
	}
	if s.Client.IsValid() && r.cfg.Streams.ClientAddress {
		a.PutStr(genai.AttrClientAddress, s.Client.Addr().Unmap().String())
		a.PutInt(genai.AttrClientPort, int64(s.Client.Port()))
	}
	putSpanGenAI(a, s)
	a.PutStr(attrStreamMode, s.Mode.String())
	a.PutStr("tokenwire.stream.end_reason", s.EndReason.String())
	a.PutInt("tokenwire.stream.chunks", s.Chunks)
	a.PutInt("tokenwire.stream.bytes", s.Bytes)
	if s.FirstChunk != 0 {
		a.PutDouble(genai.AttrResponseTimeToFirstChunk, float64(s.FirstChunk-s.Start)/1e9)
		ev := sp.Events().AppendEmpty()
		ev.SetName("first_chunk")
		ev.SetTimestamp(r.wallTime(s.FirstChunk))
	}
	a.PutDouble("tokenwire.stream.chunk.interval.max", float64(s.GapMax)/1e9)
}

// putSpanGenAI sets what the stream said of itself: each attribute only
// when the bytes proved it.
func putSpanGenAI(a pcommon.Map, s *streamagg.Span) {
	for _, kv := range [...]struct{ key, value string }{
		{genai.AttrOperationName, s.Operation},
		{genai.AttrProviderName, s.Provider},
		{genai.AttrRequestModel, s.Model},
		{genai.AttrResponseModel, s.ResponseModel},
		{genai.AttrResponseID, s.ResponseID},
		{genai.AttrOpenAIAPIType, s.APIType},
		{genai.AttrErrorType, s.ErrorType},
	} {
		if kv.value != "" {
			a.PutStr(kv.key, kv.value)
		}
	}
	if s.StreamKnown {
		a.PutBool(genai.AttrRequestStream, s.Stream)
	}
	if len(s.FinishReasons) > 0 {
		reasons := a.PutEmptySlice(genai.AttrResponseFinishReasons)
		reasons.EnsureCapacity(len(s.FinishReasons))
		for _, r := range s.FinishReasons {
			reasons.AppendEmpty().SetStr(r)
		}
	}
	for _, c := range [...]struct {
		key   string
		count genai.Count
	}{
		{genai.AttrUsageInputTokens, s.Usage.Input},
		{genai.AttrUsageOutputTokens, s.Usage.Output},
		{genai.AttrUsageCacheReadInputTokens, s.Usage.CacheRead},
		{genai.AttrUsageCacheCreationInputTokens, s.Usage.CacheCreation},
		{genai.AttrUsageReasoningOutputTokens, s.Usage.Reasoning},
	} {
		if c.count.Known {
			a.PutInt(c.key, c.count.N)
		}
	}
	if s.IsHTTP {
		a.PutStr(attrStreamFormat, s.Format.String())
	}
}

// clientSpanName names a client call's span as the GenAI conventions name
// an inference span ("{gen_ai.operation.name} {gen_ai.request.model}"),
// else as an HTTP client span ("{http.request.method}"), else by the
// server's port (opaque).
func clientSpanName(s *streamagg.Span) string {
	switch {
	case s.Operation != "" && s.Model != "":
		return s.Operation + " " + s.Model
	case s.Operation != "":
		return s.Operation
	case s.Method != "":
		return s.Method
	}
	return "call " + strconv.Itoa(int(s.Port))
}
