package tokenwirereceiver

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

const (
	tlsThink    = 30 * time.Millisecond
	tlsEvents   = 5
	tlsInterval = 10 * time.Millisecond
)

// tlsServer is a TLS server under test: its process, port and URL.
type tlsServer struct {
	pid  int
	port int
	url  string
}

// serveTLS starts a server of stack (the Go one, in this process, when
// stack is empty) on port (0: any) that streams tlsEvents events after
// tlsThink.
func serveTLS(t *testing.T, stack teststack.Stack, cert *teststack.TLSCert, port int) tlsServer {
	t.Helper()
	if stack == "" {
		srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, tlsInterval, tlsEvents))
		return tlsServer{os.Getpid(), srv.Port, srv.URL}
	}
	srv := teststack.ServeStack(t, stack, teststack.StackOptions{Events: tlsEvents, Think: tlsThink, Interval: tlsInterval, TLS: cert, Port: port})
	return tlsServer{srv.Proc.Pid(), srv.Port, srv.URL}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// chats makes three streamed requests on two TLS connections (two on a
// keep-alive one, one on another) and returns them.
func chats(t *testing.T, cert *teststack.TLSCert, url string) []tlsRun {
	t.Helper()
	return chatsWith(t, func() *http.Client { return cert.HTTPClient(true) }, url)
}

// chatsWith is chats with clients made by newClient (one keep-alive
// connection each).
func chatsWith(t *testing.T, newClient func() *http.Client, url string) []tlsRun {
	t.Helper()
	var runs []tlsRun
	for _, n := range []int{2, 1} {
		client := newClient()
		for range n {
			runs = append(runs, chat(t, client, url))
		}
		client.Transport.(*http.Transport).CloseIdleConnections()
	}
	return runs
}

// maxWait is the longest any client waited from sending its request to
// its first event.
func maxWait(runs []tlsRun) time.Duration {
	var d time.Duration
	for _, r := range runs {
		d = max(d, r.firstEvent.Sub(r.sent))
	}
	return d
}

// checkTLSSpans checks the spans of n streams in mode on port: chunk
// counts from chunks to chunks+slack (slack 0: exact) and a TTFT between
// minTTFT and what the clients waited. It returns the spans' chunks.
func checkTLSSpans(t *testing.T, s *tlsReceiver, n int, mode string, port int, chunks, slack int64, minTTFT, maxTTFT time.Duration) int64 {
	t.Helper()
	var total int64
	require.Equal(t, n, s.traces.SpanCount())
	for _, td := range s.traces.AllTraces() {
		rs := td.ResourceSpans()
		for i := range rs.Len() {
			spans := rs.At(i).ScopeSpans().At(0).Spans()
			for j := range spans.Len() {
				sp := spans.At(j)
				a := sp.Attributes().AsRaw()
				require.Equal(t, ptrace.SpanKindServer, sp.Kind())
				require.Equal(t, mode, a["tokenwire.stream.mode"])
				require.EqualValues(t, port, a["server.port"])
				got := a["tokenwire.stream.chunks"].(int64)
				require.True(t, got >= chunks && got <= chunks+slack, "span %s: %d chunks, want %d to %d", sp.Name(), got, chunks, chunks+slack)
				total += got
				if mode == "tls" {
					require.Equal(t, "POST /v1/chat/completions", sp.Name())
					require.Equal(t, "llama-3-8b", a["gen_ai.request.model"])
					require.EqualValues(t, 200, a["http.response.status_code"])
				} else {
					require.Equal(t, "stream "+strconv.Itoa(port), sp.Name())
				}
				ttft := a["gen_ai.response.time_to_first_chunk"].(float64)
				t.Logf("span %s: mode %s, TTFT %.1f ms, %v chunks, %v bytes", sp.Name(), mode, ttft*1e3, a["tokenwire.stream.chunks"], a["tokenwire.stream.bytes"])
				require.GreaterOrEqual(t, ttft, minTTFT.Seconds())
				require.LessOrEqual(t, ttft, maxTTFT.Seconds())
			}
		}
	}
	return total
}

// checkTLSMetrics checks the last emission: n streams of chunks chunks
// in all in one series of mode on port, TTFT between minTTFT and maxTTFT.
func checkTLSMetrics(t *testing.T, s *tlsReceiver, want map[string]any, n int, chunks int64, minTTFT, maxTTFT time.Duration) {
	t.Helper()
	md := lastEmission(s.metrics)
	for _, name := range []string{"gen_ai.server.time_to_first_token", "gen_ai.server.request.duration"} {
		count, points := histogramCount(md, name, want)
		require.Equal(t, 1, points, name)
		require.EqualValues(t, n, count, name)
	}
	got, points := sumValue(md, "tokenwire.stream.chunks", want)
	require.Equal(t, 1, points)
	require.EqualValues(t, chunks, got)
	// No other stream anywhere: the handshakes made none.
	all, _ := histogramCount(md, "gen_ai.server.time_to_first_token", map[string]any{})
	require.EqualValues(t, n, all)
	forEachMetric(md, "gen_ai.server.time_to_first_token", func(m pmetric.Metric) {
		dp := m.Histogram().DataPoints().At(0)
		require.GreaterOrEqual(t, dp.Min(), minTTFT.Seconds())
		require.LessOrEqual(t, dp.Max(), maxTTFT.Seconds())
	})
}

// TLS servers on Python (uvicorn, OpenSSL 3 as a shared library), Node
// (OpenSSL linked into node) and Go (crypto/tls, this process) read as
// plaintext through the receiver: mode tls on metrics and spans with the
// counts a plaintext stream gets, TTFT at least the server's think time
// and at most what the client waited. The Node server starts after the
// receiver: the scan finds it. Shutdown leaves no uprobe link.
func TestTLSStreamsReadAsPlaintext(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	for _, tc := range []struct {
		name    string
		stack   teststack.Stack
		before  bool // the server runs before Start
		library string
	}{
		{"python", teststack.StackStarlette, true, "openssl"},
		{"node", teststack.StackNodeHTTP, false, "openssl"},
		{"go", "", true, "go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srv tlsServer
			port := 0
			if tc.before {
				srv = serveTLS(t, tc.stack, cert, 0)
				port = srv.port
			} else {
				port = freePort(t)
			}
			base, err := bpftest.NewBaseline()
			require.NoError(t, err)
			perf, events := bpftest.PerfEventFDs(t), bpftest.UprobeEvents()

			s := startTLSReceiver(t, tlsConfig(port))
			if !tc.before {
				srv = serveTLS(t, tc.stack, cert, port)
			}
			tg := s.waitTarget(t, srv.pid, "probed")
			t.Logf("probed: %+v", tg)
			require.EqualValues(t, tc.library, tg.Library)

			runs := chats(t, cert, srv.url)
			require.Eventually(t, func() bool { return s.traces.SpanCount() >= len(runs) }, 10*time.Second, 20*time.Millisecond)
			time.Sleep(300 * time.Millisecond) // an emission after the last stream
			targets := s.telemetryPoints(t, "otelcol_receiver_tokenwire_tls_targets")
			require.GreaterOrEqual(t, targets["library="+tc.library+",result=probed"], int64(1), "%v", targets)
			conns := s.telemetryPoints(t, "otelcol_receiver_tokenwire_tls_connections")
			require.EqualValues(t, 2, conns["mode=tls"], "%v", conns)
			require.Zero(t, conns["mode=opaque"], "%v", conns)
			s.stop()

			wait := maxWait(runs)
			t.Logf("clients waited at most %v for the first event", wait)
			chunks := checkTLSSpans(t, s, len(runs), "tls", srv.port, tlsEvents, 0, tlsThink, wait)
			want := map[string]any{"server.port": int64(srv.port), "http.request.method": "POST", "http.route": "/v1/chat/completions",
				"gen_ai.request.model": "llama-3-8b", "tokenwire.stream.mode": "tls"}
			checkTLSMetrics(t, s, want, len(runs), chunks, tlsThink, wait)

			objs, err := base.WaitGone(10 * time.Second)
			require.NoError(t, err)
			require.True(t, objs.Empty(), "left behind: %v", objs)
			require.Equal(t, perf, bpftest.PerfEventFDs(t), "perf event descriptors")
			require.Equal(t, events, bpftest.UprobeEvents(), "tracefs uprobe events")
		})
	}
}

// A Python TLS server whose library the configuration leaves unprobed
// (streams.tls.libraries without libssl) is timed from its TLS record
// headers: mode opaque, one stream per request (the handshake, tickets
// and alerts make none), every application-data write a chunk (the head
// alone, each event, [DONE] with the terminator), and the first of them
// (the head) no later than the client's first event.
func TestTLSStreamsOpaqueWhenNotProbed(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	srv := serveTLS(t, teststack.StackStarlette, cert, 0)
	s := startTLSReceiver(t, tlsConfig(srv.port, "go", "openssl_static"))
	s.waitTarget(t, srv.pid, "excluded")

	runs := chats(t, cert, srv.url)
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= len(runs) }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	conns := s.telemetryPoints(t, "otelcol_receiver_tokenwire_tls_connections")
	require.EqualValues(t, 2, conns["mode=opaque"], "%v", conns)
	require.Zero(t, conns["mode=tls"], "%v", conns)
	failures := s.telemetryPoints(t, "otelcol_receiver_tokenwire_tls_probe_failures")
	require.Empty(t, failures, "leaving a library out is no failure")
	s.stop()

	// The head, each event, and [DONE] with the terminator, which uvicorn
	// writes after the app's last event: on a loaded machine later than the
	// coalescing window, a chunk of its own that opaque timing cannot tell
	// from an event (internal/stream's opaque test tells it exactly, from
	// the kernel's chunk times).
	wait := maxWait(runs)
	chunks := checkTLSSpans(t, s, len(runs), "opaque", srv.port, tlsEvents+2, 1, 0, wait)
	want := map[string]any{"server.port": int64(srv.port), "tokenwire.stream.mode": "opaque"}
	checkTLSMetrics(t, s, want, len(runs), chunks, 0, wait)
}
