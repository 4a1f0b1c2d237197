package tokenwirereceiver

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
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
// two on a keep-alive connection and one on another, are read as
// plaintext: one CLIENT span each in mode tls, exact chunks, the time to
// first chunk between the server's think time and the client's wait.
func TestGoTLSClientCalls(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, tlsInterval, tlsEvents))
	cfg := tlsClientsConfig(srv.Port)
	cfg.Streams.Clients.Pids = []int{os.Getpid()}
	s := startTLSReceiver(t, cfg)

	probeSelf(t, s, srv.Addr, cert)

	runs := chats(t, cert, srv.URL)
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= len(runs) }, 10*time.Second, 20*time.Millisecond)
	time.Sleep(1200 * time.Millisecond) // any span beyond them would be out by now
	s.stop()
	spans := clientSpans(t, s.traces)
	require.Len(t, spans, len(runs))
	for i, sp := range spans {
		a := sp.Attributes().AsRaw()
		require.Equal(t, "tls", a[attrStreamMode])
		require.Equal(t, "chat llama-3-8b", sp.Name())
		require.Equal(t, "127.0.0.1", a[genai.AttrServerAddress])
		require.EqualValues(t, srv.Port, a[genai.AttrServerPort])
		require.Equal(t, "terminator", a["tokenwire.stream.end_reason"])
		require.EqualValues(t, tlsEvents, a["tokenwire.stream.chunks"])
		ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
		wait := runs[i].firstEvent.Sub(runs[i].sent)
		t.Logf("TLS call %d: time to first chunk %v, the client's wait for its first event %v", i, ttfc, wait)
		require.GreaterOrEqual(t, ttfc, tlsThink)
		require.LessOrEqual(t, ttfc, wait)
	}
}

// TestScriptTLSClientCalls: a client script making calls one after
// another on one keep-alive connection over TLS: Node's https module
// (OpenSSL, memory BIOs) and Python's http.client with ssl (the shared
// libssl, its socket BIO: the socket written inside SSL_write). Three
// ways its library comes to be probed:
//
//   - discovered: at its first call. The connection began before the
//     process was probed (its ClientHello is what reports the process),
//     so its first call is not read, and every call read after the probe
//     attached is exact. A call the probe attached in the middle of is
//     timed from its body's write call, its request unread ("call
//     {port}"): allowed for the first call read.
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
				srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, tlsInterval, tlsEvents))
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
				t.Logf("%d of %d calls read", len(spans), calls)
				if how != "discovered" {
					require.Len(t, spans, calls)
				}
				require.GreaterOrEqual(t, len(spans), calls/2, "the calls after the probe attached")
				for i, sp := range spans {
					require.Equal(t, "tls", sp.Attributes().AsRaw()[attrStreamMode])
					if how == "discovered" && i == 0 && sp.Name() == fmt.Sprintf("call %d", srv.Port) {
						// Probed while it ran: the probe attached between the
						// call's write calls (Python writes the head and the
						// body in two), so the call began at its body.
						continue
					}
					require.Equal(t, "chat m", sp.Name(), "%v", sp.Attributes().AsRaw())
				}
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
			srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, tlsInterval, tlsEvents))
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
	srv := teststack.ServeHTTPS(t, cert, sseServer(tlsThink, tlsInterval, tlsEvents))
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
		require.EqualValues(t, tlsEvents, a["tokenwire.stream.chunks"])
		ttfc := time.Duration(a[genai.AttrResponseTimeToFirstChunk].(float64) * 1e9)
		t.Logf("curl run %d: time to first chunk %v, curl's time_starttransfer %v", i, ttfc, results[i].TTFB)
		require.GreaterOrEqual(t, ttfc, tlsThink)
		require.LessOrEqual(t, ttfc, results[i].TTFB)
	}
}
