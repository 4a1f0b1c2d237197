package stream

import (
	"crypto/tls"
	"net/http"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// Without the uprobes the same real servers are timed from their TLS
// record headers: one stream per request (the handshake, session tickets
// and close_notify alerts make none), every application-data write burst
// a chunk, the first of them at the response's first write.
func TestTLSStacksOpaqueWithoutUprobes(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	for _, tc := range []struct {
		stack   teststack.Stack
		clients []string
		// The server's writes: Python's head on its own, then each event,
		// then [DONE], then the terminator; Node's head with the first
		// event, then the others, then [DONE] with the terminator.
		chunks    func(events int) int
		headAlone bool
		// The terminator is a write of its own after the report's end:
		// one chunk with [DONE] when it follows within the coalescing
		// window, a chunk of its own when the server takes longer (a
		// loaded machine), which opaque timing cannot tell from an event.
		// The kernel's last chunk start says which.
		ownTerminator bool
	}{
		{teststack.StackStarlette, []string{"curl", "go"}, func(n int) int { return n + 2 }, true, true},
		{teststack.StackNodeHTTP, []string{"node", "curl"}, func(n int) int { return n + 1 }, false, false},
	} {
		t.Run(string(tc.stack), func(t *testing.T) {
			srv := teststack.ServeStack(t, tc.stack, tlsStackOptions(cert))
			tr, rec := traceTLS(t, false, uint16(srv.Port))
			runs := stackClients(t, srv, cert, tc.clients...)
			_, ends := endsOf(t, rec, len(runs))
			reps := reportsOf(t, srv, len(runs))
			for i, end := range ends {
				after, before := reps[i].StartNS, reps[i].EventNS[0]
				if !tc.headAlone {
					after, before = reps[i].EventNS[0], reps[i].EventNS[1]
				}
				want := tc.chunks(reps[i].Events)
				if tc.ownTerminator && end.Stats.LastChunkTS > reps[i].EndNS {
					want++
				}
				checkOpaqueStream(t, end, reps[i], runs[i].sent, want, after, before)
			}
			if c, err := tr.Counters(); err != nil || c.TLS == 0 || c.TLSPlain != 0 {
				t.Errorf("counters %+v (%v): TLS connections, none read as plaintext", c, err)
			}
		})
	}
}

// The Go server without the uprobes, with TLS 1.3 and 1.2 clients: Go
// sends its session ticket with its first flight (TLS 1.3), and the
// client's Finished and request often reach it in one read.
func TestGoTLSServerOpaqueWithoutUprobes(t *testing.T) {
	bpftest.Require(t)
	cert := teststack.MakeTLSCert(t)
	for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			// [DONE] goes out with the terminator, in one record: flushed on
			// its own, the terminator's record follows when the handler has
			// returned, as a chunk of its own whenever that takes longer
			// than the coalescing window (it did under emulation), and
			// opaque timing cannot tell [DONE] from an event.
			h := &teststack.SSEServer{Think: 40 * time.Millisecond, Interval: 10 * time.Millisecond, Events: 6,
				HeadersFirst: true, Done: teststack.DoneWithEnd}
			srv := teststack.ServeHTTPS(t, cert, h)
			_, rec := traceTLS(t, false, uint16(srv.Port))
			cfg := cert.ClientConfig()
			cfg.MaxVersion = version
			tr := &http.Transport{TLSClientConfig: cfg, MaxConnsPerHost: 1}
			client := &http.Client{Transport: tr}
			var sent []uint64
			for range 3 { // one keep-alive connection
				sent = append(sent, teststack.MonotonicNow())
				if err := teststack.Fetch(client, "POST", srv.URL+"/v1/chat/completions", tlsBody); err != nil {
					t.Fatal(err)
				}
			}
			tr.CloseIdleConnections() // the last stream ends with the connection
			_, ends := endsOf(t, rec, len(sent))
			for i, end := range ends {
				s, w := end.Stats, h.Written()[i]
				// The head, each event, [DONE] with the terminator.
				if s.Flags != StatsTLSOpaque || int(s.Chunks) != h.Events+2 {
					t.Errorf("stream %v: flags %#x, %d chunks; want opaque, %d", end.ID, s.Flags, s.Chunks, h.Events+2)
				}
				if s.RequestTS < sent[i] || s.RequestTS > w.StartMono {
					t.Errorf("stream %v: request stamped at %d, outside [client sent %d, handler started %d]", end.ID, s.RequestTS, sent[i], w.StartMono)
				}
				if s.FirstChunkTS < w.HeadBefore || s.FirstChunkTS > w.HeadAfter {
					t.Errorf("stream %v: first write stamped at %d, outside the head's [%d, %d]", end.ID, s.FirstChunkTS, w.HeadBefore, w.HeadAfter)
				}
				// The last one ends with the connection (the client's
				// close, or a reset when the server's reply to its
				// close_notify finds it gone).
				last := i == len(ends)-1
				if !last && end.Reason != EndNextRequest ||
					last && end.Reason != EndClientClosed && end.Reason != EndReset && end.Reason != EndClose {
					t.Errorf("stream %v: end %v", end.ID, end.Reason)
				}
			}
		})
	}
}
