//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// exportedSpan is a span as the sink collector wrote it, with its
// resource's attributes.
type exportedSpan struct {
	Span     ptrace.Span
	Resource pcommon.Map
}

// readSpans parses the file exporter's output: OTLP JSON, one TracesData
// per line. A last line still being written is left for the next read.
func readSpans(path string) ([]exportedSpan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []exportedSpan
	var um ptrace.JSONUnmarshaler
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		td, err := um.UnmarshalTraces(line)
		if err != nil {
			if !bytes.HasSuffix(b, []byte("\n")) {
				break // partial last line
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			for j := range rs.ScopeSpans().Len() {
				spans := rs.ScopeSpans().At(j).Spans()
				for k := range spans.Len() {
					out = append(out, exportedSpan{Span: spans.At(k), Resource: rs.Resource().Attributes()})
				}
			}
		}
	}
	return out, sc.Err()
}

// waitSpans polls the sink's file until keep selects want spans.
func waitSpans(t *testing.T, path string, want int, timeout time.Duration, keep func(exportedSpan) bool) []exportedSpan {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		all, err := readSpans(path)
		if err != nil {
			t.Fatalf("reading spans: %v", err)
		}
		var got []exportedSpan
		for _, s := range all {
			if keep(s) {
				got = append(got, s)
			}
		}
		if len(got) >= want || time.Now().After(deadline) {
			if len(got) != want {
				t.Fatalf("%s: %d matching spans after %s, want %d (%d spans in the file)", path, len(got), timeout, want, len(all))
			}
			return got
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// attrStr returns a string attribute, or a description of what is there.
func attrStr(m pcommon.Map, k string) string {
	v, ok := m.Get(k)
	if !ok {
		return "<missing>"
	}
	if v.Type() != pcommon.ValueTypeStr {
		return fmt.Sprintf("<%s %s>", v.Type(), v.AsString())
	}
	return v.Str()
}

// attrInt returns an int attribute, or -1 when it is missing or not an int.
func attrInt(m pcommon.Map, k string) int64 {
	v, ok := m.Get(k)
	if !ok || v.Type() != pcommon.ValueTypeInt {
		return -1
	}
	return v.Int()
}

// attrDouble returns a double attribute, or -1 when it is missing or not a
// double.
func attrDouble(m pcommon.Map, k string) float64 {
	v, ok := m.Get(k)
	if !ok || v.Type() != pcommon.ValueTypeDouble {
		return -1
	}
	return v.Double()
}

// checkTraces reads the spans the sink collector received over OTLP and
// checks each stream's span: name, kind, attributes, timing, and the trace
// context from the request's traceparent.
func checkTraces(t *testing.T, spansFile, model string, warm, main []streamResult, bytesPerStream int) {
	ours := func(s exportedSpan) bool { return attrStr(s.Span.Attributes(), "gen_ai.request.model") == model }
	spans := waitSpans(t, spansFile, len(warm)+len(main), 30*time.Second, ours)

	byTrace := map[pcommon.TraceID]streamResult{}
	byPort := map[int64]streamResult{}
	for _, r := range main {
		byTrace[r.TP.TraceID] = r
	}
	for _, r := range append(append([]streamResult{}, warm...), main...) {
		byPort[int64(r.LocalPort)] = r
	}
	exe, _ := os.Executable()
	// One error per kind of problem, not one per span: 22 spans with the
	// same wrong attribute are one finding.
	problems := map[string][]string{}
	var order []string
	bad := func(span, format string, args ...any) {
		p := fmt.Sprintf(format, args...)
		if _, ok := problems[p]; !ok {
			order = append(order, p)
		}
		problems[p] = append(problems[p], span)
	}
	defer func() {
		for _, p := range order {
			t.Errorf("%d of %d spans: %s (first: %s)", len(problems[p]), len(spans), p, problems[p][0])
		}
	}()
	seenTrace := map[pcommon.TraceID]bool{}
	roots := 0
	for _, es := range spans {
		sp, a := es.Span, es.Span.Attributes()
		name := fmt.Sprintf("span %s (client port %d)", sp.SpanID(), attrInt(a, "client.port"))
		if got, want := sp.Name(), "POST "+chatPath; got != want {
			bad(name, "name %q, want %q", got, want)
		}
		if sp.Kind() != ptrace.SpanKindServer {
			bad(name, "kind %s, want Server", sp.Kind())
		}
		for k, want := range map[string]string{
			"http.request.method": "POST", "url.path": chatPath, "client.address": "127.0.0.1",
			"tokenwire.stream.mode": "http", "tokenwire.stream.end_reason": "terminator",
		} {
			if got := attrStr(a, k); got != want {
				bad(name, "%s = %q, want %q", k, got, want)
			}
		}
		for k, want := range map[string]string{
			"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.response.model": model,
			"gen_ai.response.id": "chatcmpl-e2e", "openai.api.type": "chat_completions", "tokenwire.stream.format": "openai",
		} {
			if got := attrStr(a, k); got != want {
				bad(name, "%s = %q, want %q", k, got, want)
			}
		}
		if v, ok := a.Get("gen_ai.response.finish_reasons"); !ok || fmt.Sprint(v.Slice().AsRaw()) != "[stop]" {
			bad(name, "gen_ai.response.finish_reasons = %v, want [stop]", a.AsRaw()["gen_ai.response.finish_reasons"])
		}
		if v, ok := a.Get("gen_ai.request.stream"); !ok || !v.Bool() {
			bad(name, "gen_ai.request.stream = %v, want true", a.AsRaw()["gen_ai.request.stream"])
		}
		for k, want := range map[string]int64{
			"http.response.status_code": 200, "server.port": streamsPort,
			"tokenwire.stream.chunks": events, "tokenwire.stream.bytes": int64(bytesPerStream),
			"gen_ai.usage.input_tokens": promptTokens, "gen_ai.usage.output_tokens": outputTokens,
		} {
			if got := attrInt(a, k); got != want {
				bad(name, "%s = %d, want %d", k, got, want)
			}
		}
		// The client port ties the span to the request that made it.
		req, ok := byPort[attrInt(a, "client.port")]
		if !ok {
			bad(name, "client.port matches no request of the test")
			continue
		}
		ttfc := attrDouble(a, "gen_ai.response.time_to_first_chunk")
		if ttfc < think.Seconds() || ttfc > req.TTFT.Seconds() {
			bad(name, "gen_ai.response.time_to_first_chunk %v, want at least the think time %v and at most the client's %v",
				ttfc, think.Seconds(), req.TTFT.Seconds())
		}
		dur := sp.EndTimestamp().AsTime().Sub(sp.StartTimestamp().AsTime())
		if wantDur := think + events*interval; dur < wantDur || dur > req.Duration {
			bad(name, "duration %s, want at least the sleeps' %s and at most the client's %s", dur, wantDur, req.Duration)
		}
		// The other intervals and the [DONE] gap are each at least an
		// interval: what is left of the stream bounds the longest.
		maxGap := dur.Seconds() - ttfc - (events-1)*(interval-gapSlack).Seconds()
		if mx := attrDouble(a, "tokenwire.stream.chunk.interval.max"); mx < (interval-gapSlack).Seconds() || mx > maxGap {
			bad(name, "tokenwire.stream.chunk.interval.max %v, want in [%v, %v]", mx, (interval - gapSlack).Seconds(), maxGap)
		}
		if ev := sp.Events(); ev.Len() != 1 || ev.At(0).Name() != "first_chunk" {
			bad(name, "%d events, want one first_chunk", ev.Len())
		} else if at := ev.At(0).Timestamp().AsTime().Sub(sp.StartTimestamp().AsTime()); math.Abs(at.Seconds()-ttfc) > 1e-6 {
			bad(name, "first_chunk event %s after the start, time_to_first_chunk says %vs", at, ttfc)
		}
		// The resource is the process that wrote the stream: this test.
		if got := es.Resource.AsRaw()["process.pid"]; got != int64(os.Getpid()) {
			bad(name, "resource process.pid = %v, want %d (this test process)", got, os.Getpid())
		}
		if got, want := attrStr(es.Resource, "process.executable.name"), filepath.Base(exe); got != want {
			bad(name, "resource process.executable.name = %q, want %q", got, want)
		}
		if req.TP == nil {
			// No traceparent: a root span in a trace of its own.
			roots++
			if !sp.ParentSpanID().IsEmpty() || sp.TraceID().IsEmpty() {
				bad(name, "request without traceparent: parent %s, trace %s; want a root span with a trace ID", sp.ParentSpanID(), sp.TraceID())
			}
			continue
		}
		if sp.TraceID() != pcommon.TraceID(req.TP.TraceID) {
			bad(name, "trace ID %s, want %s from the request's traceparent", sp.TraceID(), pcommon.TraceID(req.TP.TraceID))
		}
		if sp.ParentSpanID() != pcommon.SpanID(req.TP.SpanID) {
			bad(name, "parent span ID %s, want the caller's span %s", sp.ParentSpanID(), pcommon.SpanID(req.TP.SpanID))
		}
		if sp.SpanID().IsEmpty() || sp.SpanID() == pcommon.SpanID(req.TP.SpanID) {
			bad(name, "span ID %s must be new (caller's %s)", sp.SpanID(), pcommon.SpanID(req.TP.SpanID))
		}
		if seenTrace[sp.TraceID()] {
			bad(name, "a second span in trace %s", sp.TraceID())
		}
		seenTrace[sp.TraceID()] = true
	}
	if roots != len(warm) {
		t.Errorf("%d root spans, want %d (the requests without traceparent)", roots, len(warm))
	}
	if len(seenTrace) != len(byTrace) {
		t.Errorf("spans joined %d of the %d callers' traces", len(seenTrace), len(byTrace))
	}
	t.Logf("%d spans checked (%d joined callers' traces, %d roots)", len(spans), len(seenTrace), roots)
}

// checkFailedSpans checks the spans of the streams that failed mid-stream:
// error.type from the error event, status Error, no usage.
func checkFailedSpans(t *testing.T, spansFile, model string, n int) {
	spans := waitSpans(t, spansFile, n, 30*time.Second, func(s exportedSpan) bool {
		return attrStr(s.Span.Attributes(), "gen_ai.request.model") == model
	})
	for _, es := range spans {
		sp, a := es.Span, es.Span.Attributes()
		if got := attrStr(a, "error.type"); got != failedType || sp.Status().Code() != ptrace.StatusCodeError {
			t.Errorf("failed stream's span: error.type %q, status %s; want %q, Error", got, sp.Status().Code(), failedType)
		}
		if _, ok := a.Get("gen_ai.usage.output_tokens"); ok {
			t.Errorf("failed stream's span has usage: %v", a.AsRaw())
		}
	}
}
