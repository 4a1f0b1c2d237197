package stream

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf/features"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

const tlsBody = `{"model":"llama-3-8b","stream":true}`

// tlsStackOptions: five events, a think time before the first.
func tlsStackOptions(cert *teststack.TLSCert) teststack.StackOptions {
	return teststack.StackOptions{Events: 5, Think: 30 * time.Millisecond, Interval: 10 * time.Millisecond, TLS: cert}
}

// freePort returns a 127.0.0.1 port nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// clientRun is one request a test client made: when it began (CLOCK_MONOTONIC).
type clientRun struct {
	name string
	sent uint64
}

// stackClients sends requests to a TLS stack server one after another with
// the clients named (curl, node, go), two each, and returns when each was
// sent, in order.
func stackClients(t *testing.T, srv *teststack.StackServer, cert *teststack.TLSCert, clients ...string) []clientRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := srv.URL + "/v1/chat/completions"
	var runs []clientRun
	for _, c := range clients {
		switch c {
		case "curl":
			for range 2 { // two connections
				sent := teststack.MonotonicNow()
				if _, err := teststack.CurlWith(ctx, teststack.CurlOptions{CACert: cert.CertFile}, url, tlsBody); err != nil {
					t.Fatal(err)
				}
				runs = append(runs, clientRun{c, sent})
			}
		case "node": // two on one keep-alive connection
			res, err := teststack.NodeClient(ctx, url, cert.CertFile, 2, tlsBody)
			if err != nil || len(res) != 2 {
				t.Fatalf("node client: %v %+v", err, res)
			}
			runs = append(runs, clientRun{c, res[0].SentNS}, clientRun{c, res[1].SentNS})
		case "go": // two on one keep-alive connection, with crypto/tls
			client := &teststack.SDKClient{SDK: teststack.SDKPython, Addr: srv.Addr, TLS: cert.ClientConfig()}
			for range 2 {
				sent := teststack.MonotonicNow()
				if res, err := client.Chat(teststack.ChatRequest{Model: "llama-3-8b", Stream: true}); err != nil || !res.Done {
					t.Fatalf("go client: %v %+v", err, res)
				}
				runs = append(runs, clientRun{c, sent})
			}
			client.Close()
		}
	}
	return runs
}

// reportsOf returns the server's reports of n requests, in request order.
func reportsOf(t *testing.T, srv *teststack.StackServer, n int) []teststack.Report {
	t.Helper()
	reps, err := srv.Reports(n, 10*time.Second)
	if err != nil || len(reps) != n {
		t.Fatalf("%d server reports, want %d: %v", len(reps), n, err)
	}
	slices.SortFunc(reps, func(a, b teststack.Report) int { return int(int64(a.StartNS) - int64(b.StartNS)) })
	return reps
}

// The Python (OpenSSL 3 as a shared library, memory BIOs) and Node
// (OpenSSL linked into node) servers, read as plaintext: every stream as
// a plaintext one would be, with curl, Node and Go clients. The Python
// server runs before the probe starts, the Node one starts after; a
// second Python server, started after, is read through the shared libssl
// probed for every process (streams.tls.system_wide).
func TestTLSStacksReadAsPlaintext(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	for _, tc := range []struct {
		stack   teststack.Stack
		before  bool
		clients []string
		wide    bool
	}{
		{teststack.StackStarlette, true, []string{"curl", "go"}, false},
		{teststack.StackNodeHTTP, false, []string{"node", "curl"}, false},
		{teststack.StackStarlette, false, []string{"go", "curl"}, true},
	} {
		name := string(tc.stack)
		if tc.wide {
			name += "/system_wide"
		}
		t.Run(name, func(t *testing.T) {
			opts := tlsStackOptions(cert)
			var srv *teststack.StackServer
			if tc.before {
				srv = teststack.ServeStack(t, tc.stack, opts)
				opts.Port = srv.Port
			} else {
				opts.Port = freePort(t)
			}
			cfg := tlsTestConfig(t, true, uint16(opts.Port))
			if tc.wide {
				cfg.TLS.SystemWide = []string{teststack.RequireSharedLibSSL(t)}
			}
			tr, rec := traceTLSWith(t, cfg)
			if !tc.before {
				srv = teststack.ServeStack(t, tc.stack, opts)
			}
			tg := waitProbed(t, tr, srv.Proc.Pid())
			t.Logf("probed: %+v", tg)
			if tg.SystemWide != tc.wide {
				t.Fatalf("system-wide %v, but the server's target is %+v", tc.wide, tg)
			}

			runs := stackClients(t, srv, cert, tc.clients...)
			streams, ends := endsOf(t, rec, len(runs))
			reps := reportsOf(t, srv, len(runs))
			for i, end := range ends {
				checkPlainStream(t, streams[end.ID], end, reps[i], runs[i].sent, true)
			}
			c, err := tr.Counters()
			if err != nil || c.TLS != c.TLSPlain || c.TLS == 0 {
				t.Errorf("counters %+v (%v): every TLS connection should be read as plaintext", c, err)
			}
		})
	}
}

// A Go server (crypto/tls, in this process) read as plaintext: the exact
// checks of the plaintext SSE test, each kernel stamp inside the bracket
// of the write it stands for; with the uprobes attached by uprobe_multi
// links where the kernel has them, and by one perf-event link each, as
// older kernels need.
func TestGoTLSServerReadAsPlaintext(t *testing.T) {
	bpftest.Require(t)
	for _, perfLinks := range []bool{false, true} {
		t.Run(fmt.Sprintf("perfLinks=%v", perfLinks), func(t *testing.T) {
			if !perfLinks && features.HaveBPFLinkUprobeMulti() != nil {
				t.Skip("no uprobe_multi links on this kernel")
			}
			cfg := tlsTestConfig(t, true)
			cfg.tlsPerfLinks = perfLinks
			goTLSServerReadAsPlaintext(t, cfg)
		})
	}
}

func goTLSServerReadAsPlaintext(t *testing.T, cfg Config) {
	cert := teststack.MakeTLSCert(t)
	h := &teststack.SSEServer{Think: 40 * time.Millisecond, Interval: 10 * time.Millisecond, Events: 6,
		HeadersFirst: true, Done: teststack.DoneFlushed}
	srv := teststack.ServeHTTPS(t, cert, h)
	cfg.Ports = []uint16{uint16(srv.Port)}
	tr, rec := traceTLSWith(t, cfg)
	waitProbed(t, tr, os.Getpid())
	for _, prog := range tr.TLSPrograms() {
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		checkVerifierHeadroom(t, "uprobe", info)
	}

	client := cert.HTTPClient(true)
	var sent []uint64
	for range 3 { // one keep-alive connection
		sent = append(sent, teststack.MonotonicNow())
		if err := teststack.Fetch(client, "POST", srv.URL+"/v1/chat/completions", tlsBody); err != nil {
			t.Fatal(err)
		}
	}
	streams, ends := endsOf(t, rec, len(sent))
	written := h.Written()
	for i, end := range ends {
		s, w := end.Stats, written[i]
		if !s.TLS() || end.Reason != EndTerminator || int(s.Chunks) != h.Events {
			t.Errorf("stream %v: flags %#x, end %v, %d chunks; want TLS, terminator, %d", end.ID, s.Flags, end.Reason, s.Chunks, h.Events)
		}
		want := uint64(teststack.ChunkedSize(len(teststack.DoneEvent)))
		for _, n := range w.Sizes {
			want += uint64(n)
		}
		if s.Bytes != want {
			t.Errorf("stream %v: %d bytes, the plaintext's %d", end.ID, s.Bytes, want)
		}
		if s.RequestTS < sent[i] || s.RequestTS > w.StartMono {
			t.Errorf("stream %v: request stamped at %d, outside [client sent %d, handler started %d]", end.ID, s.RequestTS, sent[i], w.StartMono)
		}
		if s.HeadersTS < w.HeadBefore || s.HeadersTS > w.HeadAfter {
			t.Errorf("stream %v: head stamped at %d, outside its write [%d, %d]", end.ID, s.HeadersTS, w.HeadBefore, w.HeadAfter)
		}
		chunkTS := []uint64{s.FirstChunkTS}
		for _, r := range streams[end.ID] {
			if r.Kind == KindChunk {
				chunkTS = append(chunkTS, r.Stats.LastChunkTS)
			}
		}
		if len(chunkTS) != len(w.Before) {
			t.Fatalf("stream %v: %d chunk stamps, %d writes", end.ID, len(chunkTS), len(w.Before))
		}
		for k, ts := range chunkTS {
			if ts < w.Before[k] || ts > w.After[k] {
				t.Errorf("stream %v: chunk %d stamped at %d, outside its write [%d, %d]", end.ID, k, ts, w.Before[k], w.After[k])
			}
		}
		if head, _ := headOf(t, streams[end.ID]); head.Flags&RespHTTP == 0 {
			t.Errorf("stream %v: head %q", end.ID, head.Data)
		}
		t.Logf("stream %v: TTFT %v, %d chunks, %d bytes", end.ID, time.Duration(s.FirstChunkTS-s.RequestTS), s.Chunks, s.Bytes)
	}
}
