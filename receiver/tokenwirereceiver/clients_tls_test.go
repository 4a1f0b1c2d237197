package tokenwirereceiver

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// tlsClientsConfig measures the TLS calls to remotePort as a client's,
// probing client processes' TLS libraries (scanning every 100 ms).
func tlsClientsConfig(remotePort int) *Config {
	cfg := clientsConfig(remotePort)
	cfg.Streams.TLS.Enabled = true
	cfg.Streams.TLS.ScanInterval = MinTLSScanInterval
	return cfg
}

// probeSelf makes this process's TLS known to the kernel with a TLS
// handshake alone to the client port addr (no request: no call), and
// waits until its crypto/tls is probed.
func probeSelf(t *testing.T, s *tlsReceiver, addr string, cert *teststack.TLSCert) {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cert.ClientConfig())
	require.NoError(t, err)
	require.NoError(t, conn.Handshake())
	conn.Close()
	s.waitTarget(t, os.Getpid(), "probed")
}

// TestGoTLSClientCalls: a Go crypto/tls client in this process. Its first
// TLS connection to the client port (a handshake alone) makes the kernel
// report the process, whose crypto/tls is then probed; the calls after it,
// two on a keep-alive connection and one on each of goTLSNewConns others,
// are read as plaintext: one CLIENT span each in mode tls, exact chunks,
// the time to first chunk between the server's think time and the
// client's wait.
//
// The server is in this process too, on a port nobody watches as a
// server's, as in an agent gateway that serves and calls out: its probed
// writes have no socket write that ends them, and its goroutines' gs go
// to the client's later goroutines (a new connection's handshake), which
// must not take those writes for their own requests.
func TestGoTLSClientCalls(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, clientEventInterval, tlsEvents))
	cfg := tlsClientsConfig(srv.Port)
	cfg.Streams.Clients.Pids = []int{os.Getpid()}
	s := startTLSReceiver(t, cfg)

	probeSelf(t, s, srv.Addr, cert)

	runs := chats(t, cert, srv.URL)
	runs = append(runs, chatsOnNewConns(t, cert, srv.URL, goTLSNewConns)...)
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= len(runs) }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(1200 * time.Millisecond) // any span beyond them would be out by now
	var unread int64
	for _, n := range s.telemetryPoints(t, "otelcol_receiver_tokenwire_payloads_unread") {
		unread += n
	}
	s.stop()
	spans := clientSpans(t, s.traces)
	if len(spans) != len(runs) {
		for i, sp := range spans {
			a := sp.Attributes().AsRaw()
			t.Logf("span %d: %s, %s to %s, mode %v, %v chunks, end %v", i, sp.Name(), sp.StartTimestamp(), sp.EndTimestamp(),
				a[attrStreamMode], a["tokenwire.stream.chunks"], a["tokenwire.stream.end_reason"])
		}
	}
	require.Len(t, spans, len(runs))
	var uncaptured int64
	for i, sp := range spans {
		a := sp.Attributes().AsRaw()
		require.Equal(t, "tls", a[attrStreamMode])
		if sp.Name() != "chat llama-3-8b" {
			// A request goes unread only when a page of its buffer was not
			// mapped as the probe read it (the Go heap's pages can be
			// migrated or collapsed into huge pages at any time), and the
			// kernel counts each such read (TestGoClientCallInKernel).
			require.Equal(t, fmt.Sprintf("call %d", srv.Port), sp.Name())
			uncaptured++
		}
		require.Equal(t, "127.0.0.1", a[genai.AttrServerAddress])
		require.EqualValues(t, srv.Port, a[genai.AttrServerPort])
		require.Equal(t, "terminator", a["tokenwire.stream.end_reason"])
		require.Len(t, runs[i].eventNS, tlsEvents)
		requireClientChunks(t, a["tokenwire.stream.chunks"], runs[i].eventNS, fmt.Sprintf("call %d", i))
		ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
		wait := runs[i].firstEvent.Sub(runs[i].sent)
		t.Logf("TLS call %d (%s): time to first chunk %v, the client's wait for its first event %v", i, sp.Name(), ttfc, wait)
		require.GreaterOrEqual(t, ttfc, tlsThink)
		require.LessOrEqual(t, ttfc, wait)
	}
	require.GreaterOrEqual(t, unread, uncaptured, "calls with their request unread, and the unread payloads counted")
	if uncaptured > 0 {
		t.Logf("%d calls' requests could not be read (%d unread payloads counted)", uncaptured, unread)
	}
}

// TestGoTLSClientCallBehindALongHead: a Go crypto/tls client in this
// process calls a server that streams as Anthropic's API does, with its
// 1.1 KiB of headers, which Go's net/http writes with message_start in one
// write. Go's crypto/tls cuts a connection's first records at about 1.2
// KiB, so the client reads the head with message_start's first bytes,
// then the rest of it. The call's span has what message_start says
// (response model, id, input tokens), read across the two, as well as
// message_delta's output tokens and stop reason; the two reads are one
// chunk when closer than streams.coalesce, as they are but for a
// descheduled client.
func TestGoTLSClientCallBehindALongHead(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	srv := teststack.ServeHTTPS(t, cert, anthropicGateway(tlsThink, clientEventInterval))

	// The premise, before anything watches: a client's first read of the
	// response ends inside message_start, before its id.
	conn, err := tls.Dial("tcp", srv.Addr, cert.ClientConfig())
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(anthropicBody), anthropicBody)
	require.NoError(t, err)
	buf := make([]byte, 16<<10)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	conn.Close()
	_, body, ok := strings.Cut(string(buf[:n]), "\r\n\r\n")
	require.True(t, ok && strings.Contains(body, "message_start") && !strings.Contains(body, `"id"`),
		"the first read is not the head and the start of message_start: %q", buf[:n])

	cfg := tlsClientsConfig(srv.Port)
	cfg.Streams.Clients.Pids = []int{os.Getpid()}
	s := startTLSReceiver(t, cfg)
	probeSelf(t, s, srv.Addr, cert)

	req, err := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(anthropicBody))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	client := cert.HTTPClient(true)
	sent := time.Now()
	resp, err := client.Do(req)
	require.NoError(t, err)
	var eventNS []uint64
	var firstEvent time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if teststack.IsEventLine(sc.Text()) {
			if firstEvent.IsZero() {
				firstEvent = time.Now()
			}
			eventNS = append(eventNS, teststack.MonotonicNow())
		}
	}
	require.NoError(t, sc.Err())
	resp.Body.Close()
	client.Transport.(*http.Transport).CloseIdleConnections()
	require.Len(t, eventNS, len(anthropicEvents))

	require.Eventually(t, func() bool { return s.traces.SpanCount() >= 1 }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // any span beyond it would be out by now
	s.stop()
	spans := clientSpans(t, s.traces)
	require.Len(t, spans, 1)
	a := spans[0].Attributes().AsRaw()
	require.Equal(t, "tls", a[attrStreamMode])
	w := anthropicWant
	require.Equal(t, "chat "+w.reqModel, spans[0].Name())
	for key, want := range map[string]any{
		genai.AttrResponseModel: w.respModel, genai.AttrResponseID: w.respID,
		genai.AttrUsageInputTokens: w.input, genai.AttrUsageOutputTokens: w.output,
		genai.AttrResponseFinishReasons: []any{"end_turn"}, "tokenwire.stream.end_reason": "terminator",
	} {
		require.Equal(t, want, a[key], key)
	}
	requireClientReads(t, a["tokenwire.stream.chunks"], eventNS, 1, "the call")
	ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
	require.GreaterOrEqual(t, ttfc, tlsThink)
	require.LessOrEqual(t, ttfc, firstEvent.Sub(sent), "the first chunk is the read of the head and message_start's start")
}

// TestScriptTLSClientCalls: a client script making calls one after
// another on one keep-alive connection over TLS: Node's https module
// (OpenSSL, memory BIOs) and Python's http.client with ssl (the shared
// libssl, its socket BIO: the socket written inside SSL_write). Three
// ways its library comes to be probed:
//
//   - discovered: at its first call. The connection began before the
//     process was probed (its ClientHello is what reports the process):
//     its calls before the probe attached are timed from their TLS
//     records (opaque, "call {port}"), every call after it is read. A
//     call the probe attached in the middle of is read from there: its
//     request unread ("call {port}"), in mode tls if its response's head
//     was read in plaintext.
//   - scanned: the scan probes it (the script selected by name waits
//     before it connects): every call is read.
//   - system_wide: the shared libssl is probed for every process from
//     Start (streams.tls.system_wide): every call is read, with no wait.
//
// A client's TLS connection is readied for plaintext at its ClientHello,
// before its process is probed, so a process whose probes attach before
// its first write call (Python, discovered: probing libssl takes
// milliseconds) has that call read too. Node writes its socket after its
// write call returned, and reads none before its first: its first call's
// request is read at that socket write, from the buffer the write call
// was handed, which Node still holds then. Every call read has its
// operation and model.
func TestScriptTLSClientCalls(t *testing.T) {
	bpftest.Require(t)
	for _, c := range scriptClients {
		for _, how := range []string{"discovered", "scanned", "system_wide"} {
			t.Run(c.name+"/"+how, func(t *testing.T) {
				c.require(t)
				cert := teststack.MakeTLSCert(t)
				srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, clientEventInterval, tlsEvents))
				cfg := tlsClientsConfig(srv.Port)
				cfg.Streams.Clients.ProcessNames = []string{c.comm}
				cfg.Streams.Clients.Pids = []int{os.Getpid()}
				if how == "system_wide" {
					cfg.Streams.TLS.SystemWide = []string{teststack.RequireOpenSSLFile(t, c.stack)}
				}
				s := startTLSReceiver(t, cfg)
				// The uprobe programs load at the first process probed, which
				// takes a second: this one's, before the script starts.
				probeSelf(t, s, srv.Addr, cert)
				if how == "scanned" {
					t.Setenv(teststack.ClientStartDelayEnv, "600") // the scan runs every 100 ms
				}

				const calls = 8
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				res, err := c.run(ctx, srv.URL+"/v1/chat/completions", cert.CertFile, calls, `{"model":"m","stream":true}`)
				require.NoError(t, err)
				require.Len(t, res, calls)
				time.Sleep(1200 * time.Millisecond)
				s.stop()
				spans := clientSpans(t, s.traces)
				require.Len(t, spans, calls)
				read := 0
				for i, sp := range spans {
					mode := sp.Attributes().AsRaw()[attrStreamMode]
					t.Logf("call %d: %s, mode %s", i, sp.Name(), mode)
					if how == "discovered" && read == 0 && sp.Name() == fmt.Sprintf("call %d", srv.Port) {
						continue // before the probe attached, or while it did
					}
					require.Equal(t, "tls", mode)
					require.Equal(t, "chat m", sp.Name(), "%v", sp.Attributes().AsRaw())
					read++
				}
				require.GreaterOrEqual(t, read, calls/2, "the calls after the probe attached")
				checkScriptCalls(t, spans, res, tlsThink)
			})
		}
	}
}

// TestNodeTLSFirstCallOfALongRequest: Node's first call on a connection
// has its request read from the first 4 KiB the kernel copied at its
// write call's return (docs/tls.md#clients), the later calls in full. A
// body of about 6 KiB with the model first: every call has it. With the
// model after 5 KiB of messages: the first call has its operation but
// not its model, the second both.
func TestNodeTLSFirstCallOfALongRequest(t *testing.T) {
	bpftest.Require(t)
	teststack.RequireStack(t, teststack.StackNodeHTTP)
	filler := strings.Repeat("x", 5000)
	for _, c := range []struct {
		name, body string
		firstModel bool
	}{
		{"model first", `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + filler + `"}]}`, true},
		{"model last", `{"messages":[{"role":"user","content":"` + filler + `"}],"stream":true,"model":"m"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cert := teststack.MakeTLSCert(t)
			srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, clientEventInterval, tlsEvents))
			cfg := tlsClientsConfig(srv.Port)
			cfg.Streams.Clients.ProcessNames = []string{"node"}
			cfg.Streams.Clients.Pids = []int{os.Getpid()}
			s := startTLSReceiver(t, cfg)
			probeSelf(t, s, srv.Addr, cert)
			t.Setenv(teststack.ClientStartDelayEnv, "600") // probed by the scan before it connects

			const calls = 2
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := teststack.NodeClient(ctx, srv.URL+"/v1/chat/completions", cert.CertFile, calls, c.body)
			require.NoError(t, err)
			require.Len(t, res, calls)
			require.Eventually(t, func() bool { return s.traces.SpanCount() >= calls }, 10*time.Second, 20*time.Millisecond)
			time.Sleep(1200 * time.Millisecond) // any span beyond them would be out by now
			s.stop()
			spans := clientSpans(t, s.traces)
			require.Len(t, spans, calls)
			for i, sp := range spans {
				a := sp.Attributes().AsRaw()
				require.Equal(t, "tls", a[attrStreamMode])
				require.Equal(t, "chat", a[genai.AttrOperationName], "call %d", i)
				if i == 0 && !c.firstModel {
					require.NotContains(t, a, genai.AttrRequestModel, "the model is beyond the first call's first 4 KiB")
					require.Equal(t, "chat", sp.Name())
					continue
				}
				require.Equal(t, "m", a[genai.AttrRequestModel], "call %d", i)
				require.Equal(t, "chat m", sp.Name())
			}
			checkScriptCalls(t, spans, res, tlsThink)
		})
	}
}

// TestOneShotTLSClientIsRead: curl makes one TLS call and exits, in less
// time than a scan or its ClientHello's report could get it probed. With
// the shared libssl probed system-wide its call is read in full: one
// CLIENT span in mode tls with its model, every event a chunk, the time to
// first chunk between the server's think time and curl's own wait. The
// run is repeated, each curl a new process; the library is probed once,
// for every process (a target with pid 0).
func TestOneShotTLSClientIsRead(t *testing.T) {
	bpftest.Require(t)
	teststack.RequireTool(t, "curl")
	lib := teststack.RequireSharedLibSSL(t)
	cert := teststack.MakeTLSCert(t)
	srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, clientEventInterval, tlsEvents))
	cfg := tlsClientsConfig(srv.Port)
	cfg.Streams.Clients.ProcessNames = []string{"curl"}
	cfg.Streams.TLS.SystemWide = []string{lib}
	s := startTLSReceiver(t, cfg)
	wide := s.waitTarget(t, 0, "probed")
	require.True(t, wide.SystemWide)
	require.Equal(t, lib, wide.Path)

	const runs = 3
	var results []teststack.CurlResult
	for range runs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := teststack.CurlWith(ctx, teststack.CurlOptions{CACert: cert.CertFile}, srv.URL+"/v1/chat/completions",
			`{"model":"llama-3-8b","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		cancel()
		require.NoError(t, err)
		require.Equal(t, 200, res.Status)
		results = append(results, res)
	}
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= runs }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(1200 * time.Millisecond) // any span beyond them would be out by now
	s.stop()
	spans := clientSpans(t, s.traces)
	require.Len(t, spans, runs)
	slices.SortFunc(spans, func(a, b ptrace.Span) int { return cmp.Compare(a.StartTimestamp(), b.StartTimestamp()) })
	for i, sp := range spans {
		a := sp.Attributes().AsRaw()
		require.Equal(t, "tls", a[attrStreamMode])
		require.Equal(t, "chat llama-3-8b", sp.Name())
		require.EqualValues(t, srv.Port, a[genai.AttrServerPort])
		require.Len(t, results[i].EventNS, tlsEvents)
		requireClientChunks(t, a["tokenwire.stream.chunks"], results[i].EventNS, fmt.Sprintf("curl run %d", i))
		ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
		t.Logf("curl run %d: time to first chunk %v, curl's time_starttransfer %v", i, ttfc, results[i].TTFB)
		require.GreaterOrEqual(t, ttfc, tlsThink)
		require.LessOrEqual(t, ttfc, results[i].TTFB)
	}
}

// TestTLSClientCallsTimedFromRecords: a client whose TLS library is not
// read has its calls timed from its TLS records (opaque mode): one CLIENT
// span per call named "call {port}", the handshake, session tickets and
// close_notify none; every application-data read a chunk (the head comes
// with the first event; the terminator may be one of its own); the time to
// first chunk between the server's think time and the client's own wait.
//
//   - excluded (python; go, this process): streams.tls.libraries leaves
//     the client's library out. Its first connection is readied for
//     plaintext before user space looks at its process, and is timed from
//     its records while no call of it is read (TLS_WAIT); the process is
//     then known to be unprobeable, and later connections begin opaque.
//     Python's calls are all on that first connection. The Go client's
//     first connection is a handshake alone, which makes no call; its
//     calls come once it is known to be unprobeable, so that the work of looking
//     at this process (seconds in an emulated guest) does not delay the
//     client's reads into fewer, larger ones.
//   - tls off (curl; go): streams.tls.enabled false, nothing is probed:
//     three one-shot curls, each a new process, and the Go client's calls
//     are timed from their first record. These call the Go server, which
//     sends its session ticket with its handshake. Once more with the Go
//     client reading each record as OpenSSL's socket BIO does, header and
//     body apart, and slower than streams.coalesce between the two: a
//     record is one chunk however its reads fall.
//   - tls off, tickets after the request (node; python): calls to Node's
//     https server, whose OpenSSL sends two session tickets only once it
//     has read the client's Finished, so after the first request.
func TestTLSClientCallsTimedFromRecords(t *testing.T) {
	bpftest.Require(t)
	t.Run("python/excluded", func(t *testing.T) {
		teststack.RequireTool(t, "python3")
		cert := teststack.MakeTLSCert(t)
		srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, clientEventInterval, tlsEvents))
		cfg := tlsClientsConfig(srv.Port)
		cfg.Streams.TLS.Libraries = []string{"go"}
		cfg.Streams.Clients.ProcessNames = []string{"python3"}
		s := startTLSReceiver(t, cfg)

		var conns map[string]int64
		res, spans := opaqueScriptCalls(t, s, teststack.PythonClient, srv.URL, srv.Port, cert, 6, func() {
			conns = s.telemetryPoints(t, "otelcol_receiver_tokenwire_tls_connections")
		})
		require.EqualValues(t, 1, conns["mode=opaque"], "%v", conns)
		require.Zero(t, conns["mode=tls"], "%v", conns)
		checkScriptCalls(t, spans, res, tlsThink)
	})
	for _, c := range []struct {
		name  string
		tlsOn bool
		pause time.Duration // between a record's header read and its body read; 0: Go's own reads
	}{
		{"go/excluded", true, 0},
		{"go/tls off", false, 0},
		{"go/tls off, header and body read apart", false, 4 * createDefaultConfig().Streams.Coalesce},
	} {
		tlsOn := c.tlsOn
		t.Run(c.name, func(t *testing.T) {
			cert := teststack.MakeTLSCert(t)
			srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, clientEventInterval, tlsEvents))
			cfg := tlsClientsConfig(srv.Port)
			cfg.Streams.TLS.Enabled = tlsOn
			cfg.Streams.TLS.Libraries = []string{"libssl"}
			cfg.Streams.Clients.Pids = []int{os.Getpid()}
			cfg.Streams.Clients.Hosts = []string{"localhost"} // the server name the client asks for
			s := startTLSReceiver(t, cfg)
			opaqueConns := 2
			if tlsOn {
				conn, err := tls.Dial("tcp", srv.Addr, cert.ClientConfig())
				require.NoError(t, err)
				require.NoError(t, conn.Handshake())
				require.NoError(t, conn.Close())
				s.waitTarget(t, os.Getpid(), "unprobeable") // no libssl, and its Go left out
				opaqueConns++
			}

			// Two calls on a connection, one on another, asking for the
			// server name localhost (SNI) at the server's address.
			runs := chatsWith(t, func() *http.Client {
				client := cert.HTTPClient(true)
				if c.pause > 0 {
					client = cert.HTTPClientReadingRecords(c.pause)
				}
				client.Transport.(*http.Transport).TLSClientConfig.ServerName = "localhost"
				return client
			}, srv.URL)
			require.Eventually(t, func() bool { return s.traces.SpanCount() >= len(runs) }, 10*time.Second, 20*time.Millisecond)
			time.Sleep(1200 * time.Millisecond)
			conns := s.telemetryPoints(t, "otelcol_receiver_tokenwire_tls_connections")
			s.stop()
			require.EqualValues(t, opaqueConns, conns["mode=opaque"], "%v", conns)
			require.Zero(t, conns["mode=tls"], "%v", conns)
			var calls []clientCall
			for _, r := range runs {
				calls = append(calls, clientCall{wait: r.firstEvent.Sub(r.sent), eventNS: r.eventNS, doneNS: r.doneNS})
			}
			checkOpaqueClientCalls(t, clientSpans(t, s.traces), "localhost", srv.Port, calls)
		})
	}
	t.Run("curl/tls off", func(t *testing.T) {
		teststack.RequireTool(t, "curl")
		cert := teststack.MakeTLSCert(t)
		srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, clientEventInterval, tlsEvents))
		cfg := clientsConfig(srv.Port)
		cfg.Streams.Clients.ProcessNames = []string{"curl"}
		s := startTLSReceiver(t, cfg)

		const runs = 3
		var calls []clientCall
		for range runs {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := teststack.CurlWith(ctx, teststack.CurlOptions{CACert: cert.CertFile}, srv.URL+"/v1/chat/completions",
				`{"model":"llama-3-8b","stream":true}`)
			cancel()
			require.NoError(t, err)
			require.Equal(t, 200, res.Status)
			calls = append(calls, clientCall{wait: res.TTFB, eventNS: res.EventNS, doneNS: res.DoneNS})
		}
		require.Eventually(t, func() bool { return s.traces.SpanCount() >= runs }, 10*time.Second, 20*time.Millisecond)
		time.Sleep(1200 * time.Millisecond)
		s.stop()
		checkOpaqueClientCalls(t, clientSpans(t, s.traces), "127.0.0.1", srv.Port, calls)
	})
	// Node writes its Finished with its first request, Python right
	// before it; Node reads both tickets at once, Python's socket BIO a
	// header and a body at a time.
	for _, c := range scriptClients {
		t.Run(c.name+"/tls off, tickets after the request", func(t *testing.T) {
			c.require(t)
			teststack.RequireStack(t, teststack.StackNodeHTTP)
			cert := teststack.MakeTLSCert(t)
			srv := teststack.ServeStack(t, teststack.StackNodeHTTP, teststack.StackOptions{Events: tlsEvents, Think: tlsThink,
				Interval: clientEventInterval, TLS: cert})
			cfg := clientsConfig(srv.Port)
			cfg.Streams.Clients.ProcessNames = []string{c.comm}
			s := startTLSReceiver(t, cfg)
			res, spans := opaqueScriptCalls(t, s, c.run, srv.URL, srv.Port, cert, 4, nil)
			checkScriptCalls(t, spans, res, tlsThink)
		})
	}
}

// opaqueScriptCalls makes calls with the script client run to the chat
// endpoint at url, on one keep-alive connection, and returns what the
// client saw and the receiver's spans, once no more can come, in the order
// the calls started: one per call, each timed from its TLS records
// (opaque, named "call {port}"). beforeStop, when set, runs just before
// the receiver stops.
func opaqueScriptCalls(t *testing.T, s *tlsReceiver, run func(ctx context.Context, url, caFile string, requests int, body string) ([]teststack.NodeResult, error),
	url string, port int, cert *teststack.TLSCert, calls int, beforeStop func()) ([]teststack.NodeResult, []ptrace.Span) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := run(ctx, url+"/v1/chat/completions", cert.CertFile, calls, `{"model":"m","stream":true}`)
	require.NoError(t, err)
	require.Len(t, res, calls)
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= calls }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(1200 * time.Millisecond) // any span beyond them would be out by now
	if beforeStop != nil {
		beforeStop()
	}
	s.stop()
	spans := clientSpans(t, s.traces)
	require.Len(t, spans, calls)
	slices.SortFunc(spans, func(a, b ptrace.Span) int { return cmp.Compare(a.StartTimestamp(), b.StartTimestamp()) })
	for _, sp := range spans {
		require.Equal(t, "opaque", sp.Attributes().AsRaw()[attrStreamMode])
		require.Equal(t, fmt.Sprintf("call %d", port), sp.Name())
		require.Equal(t, "127.0.0.1", sp.Attributes().AsRaw()[genai.AttrServerAddress]) // a client of an address sends no server name
	}
	return res, spans
}

// clientEventInterval spaces the events of the servers the client tests
// call: a client's chunk is a read, and a client descheduled for longer
// than the interval reads two events at once (on a loaded machine,
// natively as in emulated guests, events 10 or 15 ms apart were read two
// at a time).
const clientEventInterval = 50 * time.Millisecond

// clientCall is what a client saw of one call: how long it waited from
// sending its request to its first event, and when each event and [DONE]
// reached it, in MonotonicNow's nanoseconds.
type clientCall struct {
	wait    time.Duration
	eventNS []uint64
	doneNS  uint64
}

// checkOpaqueClientCalls checks the spans of calls to the Go SSE server
// at address (the server name the clients asked for, else its IP) and
// port, timed from their TLS records, against what the clients saw (in the
// order they called): one span each, named "call {port}"; a chunk per
// read of the events and [DONE], and the chunked terminator's own when it
// was read apart from them (requireOpaqueClientChunks); the time to first
// chunk at least the server's think time (it writes the head with the
// first event; less clientTTFCFloor's slack) and at most the client's wait.
func checkOpaqueClientCalls(t *testing.T, spans []ptrace.Span, address string, port int, calls []clientCall) {
	t.Helper()
	require.Len(t, spans, len(calls))
	slices.SortFunc(spans, func(a, b ptrace.Span) int { return cmp.Compare(a.StartTimestamp(), b.StartTimestamp()) })
	for i, sp := range spans {
		a := sp.Attributes().AsRaw()
		require.Equal(t, "opaque", a[attrStreamMode])
		require.Equal(t, fmt.Sprintf("call %d", port), sp.Name())
		require.Equal(t, address, a[genai.AttrServerAddress])
		require.EqualValues(t, port, a[genai.AttrServerPort])
		msg := fmt.Sprintf("call %d", i)
		require.Len(t, calls[i].eventNS, tlsEvents, "%s: the client's events", msg)
		require.NotZero(t, calls[i].doneNS, "%s: the client got no [DONE]", msg)
		chunks := a["tokenwire.stream.chunks"].(int64)
		// The server writes [DONE] an interval after the last event.
		requireOpaqueClientChunks(t, chunks, append(slices.Clone(calls[i].eventNS), calls[i].doneNS), msg)
		ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
		t.Logf("%s: %d chunks, time to first chunk %v, the client's wait %v", msg, chunks, ttfc, calls[i].wait)
		require.GreaterOrEqual(t, ttfc, clientTTFCFloor(tlsThink, "opaque"))
		require.LessOrEqual(t, ttfc, calls[i].wait)
	}
}

// TestGoTLSClientReadsTheUsageWithTheEnd: a vLLM chat stream whose server
// writes the usage chunk and [DONE] without a flush between them, as a
// handler that returns after them does: net/http writes them (one HTTP
// chunk) with the chunked terminator in one write, crypto/tls in one record, and the
// client's crypto/tls hands it over in one read. That read ends with
// [DONE] and the terminator, and its end, the usage in it, goes to user
// space: the call's span has the server's token counts.
func TestGoTLSClientReadsTheUsageWithTheEnd(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	srv := teststack.ServeHTTPS(t, cert, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		time.Sleep(tlsThink)
		for _, ev := range []string{llmwire.VLLMChatFirst, llmwire.VLLMChatToken, llmwire.VLLMChatFinish} {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
			time.Sleep(clientEventInterval)
		}
		io.WriteString(w, llmwire.VLLMChatUsage)
		io.WriteString(w, llmwire.SSEDone)
	}))
	cfg := tlsClientsConfig(srv.Port)
	cfg.Streams.Clients.Pids = []int{os.Getpid()}
	s := startTLSReceiver(t, cfg)
	probeSelf(t, s, srv.Addr, cert)

	run := chat(t, cert.HTTPClient(true), srv.URL)
	require.Len(t, run.eventNS, 4, "the three events and the usage chunk")
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= 1 }, 10*time.Second, 20*time.Millisecond)
	s.stop()
	spans := clientSpans(t, s.traces)
	require.Len(t, spans, 1)
	a := spans[0].Attributes().AsRaw()
	t.Logf("span %s: %v", spans[0].Name(), a)
	require.Equal(t, "tls", a[attrStreamMode])
	require.Equal(t, "terminator", a["tokenwire.stream.end_reason"])
	require.Equal(t, llmwire.VLLMChatModel, a[genai.AttrResponseModel])
	require.EqualValues(t, 12, a[genai.AttrUsageInputTokens], "the usage chunk's prompt_tokens")
	require.EqualValues(t, 28, a[genai.AttrUsageOutputTokens], "the usage chunk's completion_tokens")
}
