package tokenwirereceiver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// clientsConfig measures the calls to remotePort as a client's, and no
// server: streams.ports names a port nobody serves.
func clientsConfig(remotePort int) *Config {
	cfg := streamConfig(1, 100*time.Millisecond)
	cfg.HookPreference = bpftest.HookPreference()
	cfg.Streams.TLS.Enabled = false
	cfg.Streams.Clients.RemotePorts = []int{remotePort}
	return cfg
}

func TestClientsOnlyConfigIsValid(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Streams.Ports = nil
	cfg.Streams.Clients.RemotePorts = []int{443}
	require.NoError(t, confmap.Validate(cfg))
}

// clientSpans returns every span of the sink, checking each is a CLIENT
// span.
func clientSpans(t *testing.T, traces interface{ AllTraces() []ptrace.Traces }) []ptrace.Span {
	t.Helper()
	var out []ptrace.Span
	for _, td := range traces.AllTraces() {
		rs := td.ResourceSpans()
		for i := range rs.Len() {
			spans := rs.At(i).ScopeSpans().At(0).Spans()
			for j := range spans.Len() {
				require.Equal(t, ptrace.SpanKindClient, spans.At(j).Kind())
				out = append(out, spans.At(j))
			}
		}
	}
	return out
}

// TestGoClientCalls: a Go net/http client in this process calls an SSE
// server on a client remote port over one keep-alive connection: one
// CLIENT span per call with server.address from the Host header, every
// event a chunk, the time to first chunk between the server's think time
// and the client's own wait for its first event; the GenAI client
// metrics count every call.
func TestGoClientCalls(t *testing.T) {
	bpftest.Require(t)
	const think, calls, events = 40 * time.Millisecond, 3, 6
	srv := teststack.ServeHTTP(t, sseServer(think, clientEventInterval, events))
	cfg := clientsConfig(srv.Port)
	cfg.Streams.Clients.Pids = []int{os.Getpid()}
	s := startTLSReceiver(t, cfg)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	var runs []tlsRun
	for range calls {
		runs = append(runs, chat(t, client, srv.URL))
	}
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= calls }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // a metrics emission after the last call
	s.stop()

	spans := clientSpans(t, s.traces)
	require.Len(t, spans, calls)
	intervals := 0 // between the chunks of each call
	for i, sp := range spans {
		a := sp.Attributes().AsRaw()
		require.Equal(t, "chat llama-3-8b", sp.Name())
		require.Equal(t, "127.0.0.1", a[genai.AttrServerAddress])
		require.EqualValues(t, srv.Port, a[genai.AttrServerPort])
		require.Equal(t, "POST", a[genai.AttrHTTPRequestMethod])
		require.EqualValues(t, 200, a[genai.AttrHTTPResponseStatusCode])
		require.Equal(t, "chat", a[genai.AttrOperationName])
		require.Equal(t, "terminator", a["tokenwire.stream.end_reason"])
		require.Len(t, runs[i].eventNS, events)
		requireClientChunks(t, a["tokenwire.stream.chunks"], runs[i].eventNS, fmt.Sprintf("call %d: every event the client read, the [DONE] not one", i))
		intervals += int(a["tokenwire.stream.chunks"].(int64)) - 1
		ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
		wait := runs[i].firstEvent.Sub(runs[i].sent)
		t.Logf("call %d: time to first chunk %v, the client's wait for its first event %v", i, ttfc, wait)
		require.GreaterOrEqual(t, ttfc, clientTTFCFloor(think, "plaintext"))
		require.LessOrEqual(t, ttfc, wait)
		_, hasClient := a[genai.AttrClientAddress]
		require.False(t, hasClient, "a client span names the server, not a client")
	}

	md := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	want := map[string]any{genai.AttrServerAddress: "127.0.0.1", genai.AttrServerPort: int64(srv.Port),
		genai.AttrOperationName: "chat", genai.AttrRequestModel: "llama-3-8b"}
	for name, n := range map[string]int{
		genai.MetricClientOperationDuration:           calls,
		genai.MetricClientOperationTimeToFirstChunk:   calls,
		genai.MetricClientOperationTimePerOutputChunk: intervals,
	} {
		count, points := histogramCount(md, name, want)
		require.EqualValues(t, n, count, name)
		require.Equal(t, 1, points, name)
	}
	count, _ := histogramCount(md, genai.MetricServerTimeToFirstToken, nil)
	require.Zero(t, count, "no server is watched")
}

// TestCurlClientCallsAndSelection: curl calls with a Host header and a
// traceparent: its CLIENT span has the Host header's name as
// server.address and joins the caller's trace. Calls nobody asked about
// yield nothing: to another port, by another process (this one, not
// selected by name), and to a host streams.clients.hosts leaves out.
func TestCurlClientCallsAndSelection(t *testing.T) {
	bpftest.Require(t)
	teststack.RequireTool(t, "curl")
	const think, events = 30 * time.Millisecond, 5
	srv := teststack.ServeHTTP(t, sseServer(think, clientEventInterval, events))
	other := teststack.ServeHTTP(t, sseServer(0, time.Millisecond, 2))
	cfg := clientsConfig(srv.Port)
	cfg.Streams.Clients.ProcessNames = []string{"curl"}
	cfg.Streams.Clients.Hosts = []string{"api.example.test"}
	s := startTLSReceiver(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	body := `{"model":"gpt-test","stream":true}`
	res, err := teststack.Curl(ctx, srv.URL+"/v1/chat/completions", body,
		"Host: api.example.test:8443", "traceparent: 00-"+traceID+"-"+parentID+"-01")
	require.NoError(t, err)
	// Not selected: another port, another host, another process.
	_, err = teststack.Curl(ctx, other.URL+"/v1/chat/completions", body, "Host: api.example.test")
	require.NoError(t, err)
	_, err = teststack.Curl(ctx, srv.URL+"/v1/chat/completions", body, "Host: elsewhere.test")
	require.NoError(t, err)
	chat(t, &http.Client{}, srv.URL)

	require.Eventually(t, func() bool { return s.traces.SpanCount() >= 1 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(1500 * time.Millisecond) // spans go out every second: any other would be here by now
	s.stop()
	spans := clientSpans(t, s.traces)
	require.Len(t, spans, 1)
	sp := spans[0]
	a := sp.Attributes().AsRaw()
	require.Equal(t, "api.example.test", a[genai.AttrServerAddress])
	require.EqualValues(t, srv.Port, a[genai.AttrServerPort])
	require.Equal(t, traceID, sp.TraceID().String())
	require.Equal(t, parentID, sp.ParentSpanID().String())
	require.Equal(t, "chat gpt-test", sp.Name())
	require.Len(t, res.EventNS, events)
	requireClientChunks(t, a["tokenwire.stream.chunks"], res.EventNS, "curl")
	ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
	t.Logf("curl: time to first chunk %v, curl's time_starttransfer %v", ttfc, res.TTFB)
	require.GreaterOrEqual(t, ttfc, clientTTFCFloor(think, "plaintext"))
	require.LessOrEqual(t, ttfc, res.TTFB, "the head comes with the first event: curl's first byte is the first chunk")
}

// scriptClient is a client program the tests run (teststack): Node's
// http module with a keep-alive agent, as Node SDKs call an API, and
// Python's http.client on one connection.
type scriptClient struct {
	name, comm string          // comm: as the kernel selects it (python3, where the executable is python3.11)
	stack      teststack.Stack // whose interpreter runs it
	require    func(testing.TB)
	run        func(ctx context.Context, url, caFile string, requests int, body string) ([]teststack.NodeResult, error)
}

var scriptClients = []scriptClient{
	{"node", "node", teststack.StackNodeHTTP, func(tb testing.TB) { teststack.RequireStack(tb, teststack.StackNodeHTTP) }, teststack.NodeClient},
	{"python", "python3", teststack.StackStarlette, func(tb testing.TB) { teststack.RequireTool(tb, "python3") }, teststack.PythonClient},
}

// TestScriptClientCalls: each script client, selected by process name,
// makes calls one after another on one keep-alive connection: exact calls
// and chunks, and each call's time to first chunk against the client's
// own clock.
func TestScriptClientCalls(t *testing.T) {
	bpftest.Require(t)
	for _, c := range scriptClients {
		t.Run(c.name, func(t *testing.T) {
			c.require(t)
			const think, calls, events = 40 * time.Millisecond, 3, 6
			srv := teststack.ServeHTTP(t, sseServer(think, clientEventInterval, events))
			cfg := clientsConfig(srv.Port)
			cfg.Streams.Clients.ProcessNames = []string{c.comm}
			s := startTLSReceiver(t, cfg)

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := c.run(ctx, srv.URL+"/v1/chat/completions", "", calls, `{"model":"m","stream":true}`)
			require.NoError(t, err)
			require.Len(t, res, calls)
			require.Eventually(t, func() bool { return s.traces.SpanCount() >= calls }, 10*time.Second, 20*time.Millisecond)
			s.stop()
			spans := clientSpans(t, s.traces)
			require.Len(t, spans, calls)
			for _, r := range res {
				require.Equal(t, events, r.Events)
			}
			checkScriptCalls(t, spans, res, think)
		})
	}
}

// clientTTFCFloor is the least time to first chunk a client's call in
// mode can show against a server that thinks for think before its first
// event. A call read through its TLS library's uprobes starts at the
// write call's entry, before the request reaches the server. One timed
// from its socket writes (plaintext, opaque) starts when the request's
// last write returned: on loopback the server has read it by then, and a
// client descheduled in between starts the call late, by up to
// milliseconds in an emulated guest on a loaded machine.
func clientTTFCFloor(think time.Duration, mode string) time.Duration {
	if mode == "tls" {
		return think
	}
	return think - 10*time.Millisecond
}

// checkScriptCalls checks the spans of the last len(spans) calls of res
// (a client script's, in order): chunks are the client's reads of its
// events (requireClientChunks; in opaque mode, or one more), the time to first chunk at least think and at most the client's own
// wait for its first event (CLOCK_MONOTONIC, the kernel's clock).
func checkScriptCalls(t *testing.T, spans []ptrace.Span, res []teststack.NodeResult, think time.Duration) {
	t.Helper()
	for i, sp := range spans {
		n := len(res) - len(spans) + i
		a := sp.Attributes().AsRaw()
		chunks := a["tokenwire.stream.chunks"].(int64)
		require.Len(t, res[n].EventNS, res[n].Events)
		if a[attrStreamMode] == "opaque" {
			requireOpaqueClientChunks(t, chunks, res[n].EventNS, fmt.Sprintf("call %d", n))
		} else {
			requireClientChunks(t, chunks, res[n].EventNS, fmt.Sprintf("call %d", n))
		}
		ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
		wait := time.Duration(res[n].EventNS[0] - res[n].SentNS)
		t.Logf("call %d (%s): time to first chunk %v, the client's wait for its first event %v", n, a[attrStreamMode], ttfc, wait)
		require.GreaterOrEqual(t, ttfc, clientTTFCFloor(think, a[attrStreamMode].(string)))
		require.LessOrEqual(t, ttfc, wait)
	}
}

// requireClientChunks checks a client call's chunks against the events the
// client got (eventNS: when each arrived, from a server that wrote them
// clientEventInterval apart): one per event, unless the client read some
// of them at once, and then no fewer than the reads it took
// (teststack.ChunkRange). A client's chunk is a read: the client's own
// count of reads is the exact figure, and one loaded enough to be
// descheduled for longer than the interval makes fewer.
func requireClientChunks(t *testing.T, chunks any, eventNS []uint64, msg string) {
	t.Helper()
	requireClientReads(t, chunks, eventNS, 0, msg)
}

// requireOpaqueClientChunks is requireClientChunks for a call timed from
// its TLS records, where every application-data read is a chunk: the
// chunked terminator, written after the last event, may be one more when
// it is read apart from it.
func requireOpaqueClientChunks(t *testing.T, chunks any, eventNS []uint64, msg string) {
	t.Helper()
	requireClientReads(t, chunks, eventNS, 1, msg)
}

// requireClientReads checks chunks against the reads the client took for
// the events that arrived at eventNS (teststack.ChunkRange), with up to
// more reads of what followed them.
func requireClientReads(t *testing.T, chunks any, eventNS []uint64, more int, msg string) {
	t.Helper()
	n, ok := chunks.(int64)
	require.True(t, ok, "%s: chunks %v (%T)", msg, chunks, chunks)
	lo, hi := teststack.ChunkRange(t, msg, eventNS, clientEventInterval)
	require.True(t, n >= int64(lo) && n <= int64(hi+more), "%s: %d chunks, want %d to %d", msg, n, lo, hi+more)
}
