package tokenwirereceiver

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// Pauses of the servers: before the first body write, and between writes.
const (
	genaiThink    = 20 * time.Millisecond
	genaiInterval = 5 * time.Millisecond
)

// TestGenAIFormatsThroughTheKernel streams every format, write for write
// as its server writes it, through the real probes and the receiver, and
// checks what each span and series says: model, response model, id,
// tokens, finish reasons, operation, provider, and that the time per
// output token is the stream's own timing divided by its tokens. vLLM's
// chat stream goes through FastAPI on uvicorn (vLLM's own stack), on a
// port whose provider is configured; the others through a WireServer.
func TestGenAIFormatsThroughTheKernel(t *testing.T) {
	bpftest.Require(t)
	wire, wirePort := serveWireCases(t)
	py := teststack.ServeStack(t, teststack.StackFastAPI, teststack.StackOptions{Replay: &teststack.Replay{
		MediaType: "text/event-stream", Events: vllmChatEvents, Think: genaiThink, Interval: genaiInterval}})

	cfg := streamConfig(wirePort, 200*time.Millisecond)
	cfg.Streams.Ports = []int{wirePort, py.Port}
	cfg.Streams.Providers = map[string]string{strconv.Itoa(py.Port): "vllm"}
	s := start(t, cfg)

	type run struct {
		c     genaiCase
		port  int
		span  ptrace.Span
		first [2]uint64 // bounds of the first body write's kernel time
		end   [2]uint64 // and of the write that ended the stream
	}
	var runs []run
	traceID := "0af7651916cd43dd8448eb211c80319c"
	for i, c := range wireCases() {
		req := wireRequest(t, wirePort, i, c)
		if c.traceparent {
			// The SDK's and a proxy's headers, 6 KiB of them, before the
			// traceparent: it is read 1 KiB at a time too.
			for k := range 150 {
				req.Header.Set(fmt.Sprintf("X-Stainless-Pad-%03d", k), strings.Repeat("p", 24))
			}
			req.Header.Set("traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
		}
		fetch(t, req)
		written := wire.WaitWritten(i+1, 5*time.Second)
		require.Len(t, written, i+1)
		w := written[i]
		f, e := bodyWrites(c.writes)
		runs = append(runs, run{c: c, port: wirePort, first: [2]uint64{w.Before[f], w.After[f]}, end: [2]uint64{w.Before[e], w.After[e]}})
		if c.traceparent {
			require.GreaterOrEqual(t, w.Reads, 40, "the request was not read in pieces")
		}
	}
	pyReq, err := http.NewRequest("POST", py.URL+"/v1/chat/completions",
		strings.NewReader(sdkBody(llmwire.VLLMChatModel, "What is the capital of France?",
			map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}})))
	require.NoError(t, err)
	fetch(t, pyReq)
	reps, err := py.Reports(1, 10*time.Second)
	require.NoError(t, err)
	// uvicorn writes event i after it is handed over and before the next
	// one is; [DONE] (the end) after it is handed over and before the
	// generator ends.
	ev := reps[0].EventNS
	pyWant := vllmChatWant
	pyWant.provider = "vllm"
	runs = append(runs, run{c: genaiCase{name: "vLLM chat on FastAPI/uvicorn", path: "/v1/chat/completions", want: pyWant},
		port: py.Port, first: [2]uint64{ev[0], ev[1]}, end: [2]uint64{ev[len(ev)-1], reps[0].EndNS}})

	require.Eventually(t, func() bool { return s.traces.SpanCount() == len(runs) }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // one more collection: the metrics of the last stream
	s.shutdown()
	spans := allSpans(s.traces.AllTraces())
	require.Len(t, spans, len(runs))
	for i := range runs {
		runs[i].span = spans[i] // streams ended one after the other
	}

	md := lastEmission(s.metrics)
	tpot := map[string]float64{}
	tokens := map[string][2]int64{}
	for _, r := range runs {
		t.Run(r.c.name, func(t *testing.T) {
			a := r.span.Attributes()
			checkGenAISpan(t, a, r.port, r.c)
			if r.c.traceparent {
				require.Equal(t, traceID, r.span.TraceID().String(), "the traceparent after 6 KiB of headers")
			}
			// The stream's own timing: its first body write to its end,
			// within what the server's clock saw around those writes.
			ttfc, _ := a.Get(genai.AttrResponseTimeToFirstChunk)
			dur := float64(r.span.EndTimestamp()-r.span.StartTimestamp()) / 1e9
			gen := dur - ttfc.Double()
			require.GreaterOrEqual(t, gen, float64(r.end[0]-r.first[1])/1e9-1e-9)
			require.LessOrEqual(t, gen, float64(r.end[1]-r.first[0])/1e9+1e-9)
			key := seriesOf(r.port, r.c)
			if v, ok := genai.TimePerOutputToken(ttfc.Double(), dur, genai.Count{N: r.c.want.output, Known: r.c.want.output >= 0}); ok {
				tpot[key] += v
			}
			if r.c.want.input >= 0 {
				tk := tokens[key]
				tokens[key] = [2]int64{tk[0] + r.c.want.input, tk[1] + r.c.want.output}
			}
		})
	}
	// Each series' time per output token is the sum of its streams', each
	// (duration - time to first chunk) / (output tokens - 1) of its span.
	got := map[string]float64{}
	forEachPoint(md, genai.MetricServerTimePerOutputToken, func(a pcommon.Map, dp pmetric.HistogramDataPoint) {
		got[seriesKeyOf(a)] += dp.Sum()
	})
	require.Len(t, tpot, 8, "the series whose streams reported at least 2 output tokens as final")
	require.Len(t, got, len(tpot))
	for k, v := range tpot {
		require.InDelta(t, v, got[k], 1e-9, k)
	}
	gotTokens := map[string][2]int64{}
	forEachPoint(md, genai.MetricServerTokenUsage, func(a pcommon.Map, dp pmetric.HistogramDataPoint) {
		tk := gotTokens[seriesKeyOf(a)]
		typ, _ := a.Get(genai.AttrTokenType)
		tk[slices.Index([]string{genai.TokenTypeInput, genai.TokenTypeOutput}, typ.Str())] += int64(dp.Sum())
		gotTokens[seriesKeyOf(a)] = tk
	})
	require.Equal(t, tokens, gotTokens)
}

// TestGenAIThroughNode relays Anthropic's stream through a gateway on
// Node's http module: it writes the head and the first event
// (message_start, with the model, id and input tokens) in one writev of
// four buffers, head and size line, CRLF, event, CRLF. The span has what
// that event says, as it has from a server that writes one buffer.
func TestGenAIThroughNode(t *testing.T) {
	bpftest.Require(t)
	node := teststack.ServeStack(t, teststack.StackNodeHTTP, teststack.StackOptions{Replay: &teststack.Replay{
		MediaType: "text/event-stream", Events: anthropicEvents, Think: genaiThink, Interval: genaiInterval}})
	s := start(t, streamConfig(node.Port, 200*time.Millisecond))
	req, err := http.NewRequest("POST", node.URL+"/v1/messages", strings.NewReader(anthropicBody))
	require.NoError(t, err)
	fetch(t, req)
	reps, err := node.Reports(1, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.traces.SpanCount() == 1 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // one more collection: the stream's metrics
	s.shutdown()
	span := allSpans(s.traces.AllTraces())[0]
	checkGenAISpan(t, span.Attributes(), node.Port, genaiCase{path: "/v1/messages", want: anthropicWant})
	tokens := map[string]int64{}
	forEachPoint(lastEmission(s.metrics), genai.MetricServerTokenUsage, func(a pcommon.Map, dp pmetric.HistogramDataPoint) {
		typ, _ := a.Get(genai.AttrTokenType)
		tokens[typ.Str()] += int64(dp.Sum())
	})
	require.Equal(t, map[string]int64{genai.TokenTypeInput: anthropicWant.input, genai.TokenTypeOutput: anthropicWant.output}, tokens)
	// Node writes event i with the head (i = 0) or alone after it is
	// handed over, and the terminator after the last one and before the
	// handler ends: the stream's time from its first chunk to its end.
	ev := reps[0].EventNS
	ttfc, _ := span.Attributes().Get(genai.AttrResponseTimeToFirstChunk)
	gen := float64(span.EndTimestamp()-span.StartTimestamp())/1e9 - ttfc.Double()
	require.GreaterOrEqual(t, gen, float64(ev[len(ev)-1]-ev[1])/1e9-1e-9)
	require.LessOrEqual(t, gen, float64(reps[0].EndNS-ev[0])/1e9+1e-9)
}

// TestGenAILastEventWithTheEnd streams Ollama's /api/chat from a gateway
// on Node's http module that writes the final object and ends the
// response in one tick: one writev of size line, CRLF, object, CRLF and
// the terminator. The final object's counts and reason are read.
func TestGenAILastEventWithTheEnd(t *testing.T) {
	bpftest.Require(t)
	node := teststack.ServeStack(t, teststack.StackNodeHTTP, teststack.StackOptions{Replay: &teststack.Replay{
		MediaType: "application/x-ndjson", Events: []string{llmwire.OllamaChatFirst, llmwire.OllamaChatToken, llmwire.OllamaChatFinal},
		Think: genaiThink, Interval: genaiInterval, LastTick: 1}})
	s := start(t, streamConfig(node.Port, 200*time.Millisecond))
	req, err := http.NewRequest("POST", node.URL+"/api/chat",
		strings.NewReader(`{"model":"llama3.2","messages":[{"role":"user","content":"why is the sky blue?"}]}`))
	require.NoError(t, err)
	fetch(t, req)
	_, err = node.Reports(1, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.traces.SpanCount() == 1 }, 10*time.Second, 20*time.Millisecond)
	s.shutdown()
	span := allSpans(s.traces.AllTraces())[0]
	checkGenAISpan(t, span.Attributes(), node.Port, genaiCase{path: "/api/chat", want: genaiWant{format: "ollama",
		provider: genai.ProviderOllama, operation: genai.OperationChat, reqModel: "llama3.2", respModel: "llama3.2",
		input: 26, output: 282, reasons: []string{"stop"}, chunks: 3}})
	end, _ := span.Attributes().Get("tokenwire.stream.end_reason")
	require.Equal(t, "terminator", end.Str())
}

// TestGenAIBehindLongHeads relays Anthropic's stream with the headers its
// API sends (about 1.1 KiB of them) through two gateways that write the
// head and the first event (message_start: the model, id and input
// tokens) together: one on Go's net/http (one write, on the first flush)
// and one on Node's http module (one writev, the event in the third
// buffer). The head's record carries both whole, so the first event is
// the stream's first chunk and its details are read, as they are behind a
// short head.
func TestGenAIBehindLongHeads(t *testing.T) {
	bpftest.Require(t)
	headBytes := 0
	for _, h := range llmwire.AnthropicAPIHeaders {
		headBytes += len(h[0]) + len(": ") + len(h[1]) + len("\r\n")
	}
	require.Greater(t, headBytes, 1024, "the headers are not a long head")

	goGW := teststack.ServeHTTP(t, anthropicGateway(genaiThink, genaiInterval))
	node := teststack.ServeStack(t, teststack.StackNodeHTTP, teststack.StackOptions{Replay: &teststack.Replay{
		MediaType: "text/event-stream", Events: anthropicEvents, Think: genaiThink, Interval: genaiInterval,
		Headers: llmwire.AnthropicAPIHeaders}})

	cfg := streamConfig(goGW.Port, 200*time.Millisecond)
	cfg.Streams.Ports = []int{goGW.Port, node.Port}
	s := start(t, cfg)
	for _, url := range []string{goGW.URL, node.URL} {
		req, err := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(anthropicBody))
		require.NoError(t, err)
		fetch(t, req)
	}
	reps, err := node.Reports(1, 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return s.traces.SpanCount() == 2 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // one more collection: the streams' metrics
	s.shutdown()
	spans := allSpans(s.traces.AllTraces())
	for i, port := range []int{goGW.Port, node.Port} {
		span := spans[i] // streams ended one after the other
		checkGenAISpan(t, span.Attributes(), port, genaiCase{path: "/v1/messages", want: anthropicWant})
	}
	tokens := map[string]int64{}
	forEachPoint(lastEmission(s.metrics), genai.MetricServerTokenUsage, func(a pcommon.Map, dp pmetric.HistogramDataPoint) {
		typ, _ := a.Get(genai.AttrTokenType)
		tokens[typ.Str()] += int64(dp.Sum())
	})
	require.Equal(t, map[string]int64{genai.TokenTypeInput: 2 * anthropicWant.input, genai.TokenTypeOutput: 2 * anthropicWant.output}, tokens)
	// The Node stream's first chunk is its head write, which carried
	// event 0: its time from the first chunk to its end is within what
	// the server's clock saw, as in TestGenAIThroughNode.
	ev := reps[0].EventNS
	ttfc, _ := spans[1].Attributes().Get(genai.AttrResponseTimeToFirstChunk)
	gen := float64(spans[1].EndTimestamp()-spans[1].StartTimestamp())/1e9 - ttfc.Double()
	require.GreaterOrEqual(t, gen, float64(ev[len(ev)-1]-ev[1])/1e9-1e-9)
	require.LessOrEqual(t, gen, float64(reps[0].EndNS-ev[0])/1e9+1e-9)
}

// anthropicGateway relays Anthropic's stream (anthropicEvents) with the
// headers its API sends, on Go's net/http: its first flush writes the
// head and message_start in one write, each later event goes alone, the
// first after think and the others interval apart.
func anthropicGateway(think, interval time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for _, h := range llmwire.AnthropicAPIHeaders {
			w.Header().Set(h[0], h[1])
		}
		time.Sleep(think)
		for i, e := range anthropicEvents {
			if i > 0 {
				time.Sleep(interval)
			}
			_, _ = io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	})
}

// checkGenAISpan checks a span's GenAI attributes against c.want exactly:
// present with the value, or absent.
func checkGenAISpan(t *testing.T, a pcommon.Map, port int, c genaiCase) {
	t.Helper()
	w := c.want
	for key, want := range map[string]string{
		attrStreamFormat: w.format, genai.AttrProviderName: w.provider, genai.AttrOperationName: w.operation,
		genai.AttrRequestModel: w.reqModel, genai.AttrResponseModel: w.respModel, genai.AttrResponseID: w.respID,
		genai.AttrOpenAIAPIType: w.apiType, genai.AttrErrorType: w.errType, genai.AttrURLPath: c.path,
	} {
		v, ok := a.Get(key)
		switch {
		case want == "":
			require.False(t, ok, "%s = %v, want none", key, a.AsRaw()[key])
		case !ok:
			require.Failf(t, "attribute missing", "%s, want %q", key, want)
		default:
			require.Equal(t, want, v.AsString(), key)
		}
	}
	for key, want := range map[string]int64{genai.AttrUsageInputTokens: w.input, genai.AttrUsageOutputTokens: w.output} {
		v, ok := a.Get(key)
		switch {
		case want < 0:
			require.False(t, ok, "%s = %v, want none", key, a.AsRaw()[key])
		case !ok:
			require.Failf(t, "attribute missing", "%s, want %d", key, want)
		default:
			require.Equal(t, want, v.Int(), key)
		}
	}
	var reasons []string
	if v, ok := a.Get(genai.AttrResponseFinishReasons); ok {
		for _, r := range v.Slice().AsRaw() {
			reasons = append(reasons, r.(string))
		}
	}
	require.Equal(t, w.reasons, reasons, "finish reasons")
	require.EqualValues(t, port, a.AsRaw()[genai.AttrServerPort])
	require.EqualValues(t, w.chunks, a.AsRaw()["tokenwire.stream.chunks"])
}

// respond writes a head written alone at once, and the first body write
// (or the head with it) after the model's think time, the others an
// interval apart.
func respond(writes []string) teststack.WireResponse {
	var r teststack.WireResponse
	first, _ := bodyWrites(writes)
	for i, w := range writes {
		pause := genaiInterval
		switch {
		case i < first:
			pause = 0
		case i == first:
			pause = genaiThink
		}
		r.Writes = append(r.Writes, teststack.WireWrite{After: pause, Data: w})
	}
	return r
}

// bodyWrites returns the index of a response's first body write (the head
// write when it carried body bytes) and of the write that ends it: a
// [DONE] event, else the last chunk.
func bodyWrites(writes []string) (first, end int) {
	if len(writes[0]) == strings.Index(writes[0], "\r\n\r\n")+4 {
		first = 1
	}
	for i, w := range writes {
		if i > 0 && (w == llmwire.LastChunk || strings.Contains(w, "[DONE]")) {
			return first, i
		}
	}
	return first, len(writes) - 1
}

// seriesOf and seriesKeyOf name a stream's series by what tells them apart
// here: port, route and format.
func seriesOf(port int, c genaiCase) string {
	return fmt.Sprintf("%d %s %s", port, c.path, c.want.format)
}

func seriesKeyOf(a pcommon.Map) string {
	port, _ := a.Get(genai.AttrServerPort)
	route, _ := a.Get(genai.AttrHTTPRoute)
	format, _ := a.Get(attrStreamFormat)
	return fmt.Sprintf("%d %s %s", port.Int(), route.Str(), format.Str())
}

func forEachPoint(md pmetric.Metrics, name string, fn func(pcommon.Map, pmetric.HistogramDataPoint)) {
	forEachMetric(md, name, func(m pmetric.Metric) {
		for i := range m.Histogram().DataPoints().Len() {
			dp := m.Histogram().DataPoints().At(i)
			fn(dp.Attributes(), dp)
		}
	})
}

// allSpans returns the spans of every batch in the order they ended.
func allSpans(tds []ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	for _, td := range tds {
		rs := td.ResourceSpans()
		for i := range rs.Len() {
			ss := rs.At(i).ScopeSpans()
			for j := range ss.Len() {
				for k := range ss.At(j).Spans().Len() {
					out = append(out, ss.At(j).Spans().At(k))
				}
			}
		}
	}
	slices.SortFunc(out, func(x, y ptrace.Span) int { return cmp.Compare(x.EndTimestamp(), y.EndTimestamp()) })
	return out
}

// fetch sends req on a connection of its own and reads the response to
// its end.
func fetch(t *testing.T, req *http.Request) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = io.Copy(&b, resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, b.String())
}
