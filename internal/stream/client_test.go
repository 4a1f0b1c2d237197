package stream

import (
	"cmp"
	"context"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// TestClientCallIsMeasured: curl (another process) calls a server on a
// configured remote port: one call, its request captured from curl's
// write, every event curl read a chunk, the [DONE] and terminator its end;
// a call to a port not configured yields nothing, nor does the server's
// side of the call (its port is not watched).
func TestClientCallIsMeasured(t *testing.T) {
	bpftest.Require(t)
	teststack.RequireTool(t, "curl")
	const events = 8
	srv := &teststack.SSEServer{Think: 60 * time.Millisecond, Interval: 15 * time.Millisecond, Events: events,
		Done: teststack.DoneWithEnd}
	addr, port := serve(t, srv)
	other, _ := serve(t, &teststack.SSEServer{Interval: time.Millisecond, Events: 3, Done: teststack.DoneWithEnd})
	cfg := testConfig(1) // no server on port 1: only the client side is measured
	cfg.Clients = ClientConfig{RemotePorts: []uint16{port}, Names: []string{"curl"}}
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, tr)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := teststack.Curl(ctx, "http://"+other+"/v1/chat/completions", `{"model":"m"}`); err != nil {
		t.Fatal(err)
	}
	res, err := teststack.Curl(ctx, "http://"+addr+"/v1/chat/completions", `{"model":"m"}`,
		"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil {
		t.Fatal(err)
	}
	streams := rec.ends(t, 1)
	if len(streams) != 1 {
		t.Fatalf("%d streams, want 1 (the call to the configured port): %v", len(streams), streams)
	}
	for _, rs := range streams {
		var sawReq bool
		for _, r := range rs {
			switch r.Kind {
			case KindRequest:
				sawReq = true
				if !r.Client || string(r.Data[:4]) != "POST" {
					t.Errorf("request record: client %v, data %q", r.Client, r.Data)
				}
			case KindEnd:
				st := r.Stats
				// The server writes its head with the first event: curl reads
				// them together, and the kernel counts the reads after it.
				if !st.Client() || r.Reason != EndTerminator || st.Chunks != events-1 || st.HeadBytes == 0 {
					t.Errorf("END: client %v, reason %v, chunks %d, head bytes %d; want client, terminator, %d after a head with body",
						st.Client(), r.Reason, st.Chunks, st.HeadBytes, events-1)
				}
				if st.Remote.Port() != port {
					t.Errorf("END: remote %v, want port %d", st.Remote, port)
				}
				ttft := time.Duration(st.HeadersTS - st.RequestTS)
				if ttft < srv.Think || ttft > res.TTFB {
					t.Errorf("time to first chunk %v: want at least the server's think time %v, at most curl's %v", ttft, srv.Think, res.TTFB)
				}
				t.Logf("client call: ttft %v (curl's time_starttransfer %v), chunks %d, duration %v",
					ttft, res.TTFB, st.Chunks+1, time.Duration(st.EndTS-st.RequestTS))
			}
		}
		if !sawReq {
			t.Error("no request record")
		}
	}
}

// TOKENWIRE_COST_CLIENTS=1 measures the server path with client tracking
// configured for a port the test does not call: what every other socket
// pays for it.
func init() {
	if os.Getenv("TOKENWIRE_COST_CLIENTS") != "" {
		costConfig = func(c *Config) { c.Clients = ClientConfig{RemotePorts: []uint16{1}} }
	}
}

// TestGoClientCallInKernel: a Go net/http client in this process (no
// other tool: it runs in the kernel guests too) calls a server on a client
// remote port, selected by pid: one call per request on the keep-alive
// connection, each with its request captured, every event a chunk (the
// first read with the head), ended by the terminator.
func TestGoClientCallInKernel(t *testing.T) {
	bpftest.Require(t)
	const events, calls = 5, 2
	// A client's chunk is a read: events 10 ms apart were read two at a
	// time in emulated guests on a loaded machine, so they are further
	// apart here.
	srv := &teststack.SSEServer{Think: 30 * time.Millisecond, Interval: 50 * time.Millisecond, Events: events,
		Done: teststack.DoneWithEnd}
	addr, port := serve(t, srv)
	cfg := testConfig(1)
	cfg.Clients = ClientConfig{RemotePorts: []uint16{port}, Pids: []uint32{uint32(os.Getpid())}}
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, tr)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	for range calls {
		if err := teststack.Fetch(client, "POST", "http://"+addr+"/v1/chat/completions", `{"model":"m"}`); err != nil {
			t.Fatal(err)
		}
	}
	streams := rec.ends(t, calls)
	// The server's answers, in the order the calls were made.
	written := srv.Written()
	if len(written) != calls {
		t.Fatalf("the server answered %d requests, want %d", len(written), calls)
	}
	slices.SortFunc(written, func(a, b teststack.SSEWrite) int { return cmp.Compare(a.StartMono, b.StartMono) })
	var ends []Record
	for id, rs := range streams {
		var reqs int
		for _, r := range rs {
			switch r.Kind {
			case KindRequest:
				reqs++
			case KindEnd:
				ends = append(ends, r)
			}
		}
		if reqs == 0 {
			t.Errorf("stream %v: no request captured", id)
		}
	}
	if len(ends) != calls {
		t.Fatalf("%d calls ended, want %d", len(ends), calls)
	}
	slices.SortFunc(ends, func(a, b Record) int { return cmp.Compare(a.Stats.RequestTS, b.Stats.RequestTS) })
	for i, r := range ends {
		st := r.Stats
		if !st.Client() || r.Reason != EndTerminator || st.Chunks != events-1 || st.HeadBytes == 0 ||
			st.Remote.Port() != port || st.FirstChunkTS <= st.HeadersTS {
			t.Errorf("call %d END: client %v, reason %v, chunks %d after a head of %d bytes, remote %v",
				i, st.Client(), r.Reason, st.Chunks, st.HeadBytes, st.Remote)
		}
		// The first chunk is the server's first event: read after the
		// server began to write it (CLOCK_MONOTONIC, the kernel's clock).
		// Not against the server's think time: the request's time is when
		// its write returned, which on loopback is after the server read
		// it, and a client descheduled in between (an emulated guest on a
		// loaded machine) starts the call later than the think began.
		if w := written[i]; len(w.Before) == 0 || st.HeadersTS < w.Before[0] {
			t.Errorf("call %d: first chunk read at %d (request at %d), before the server began its first event's write at %v",
				i, st.HeadersTS, st.RequestTS, w.Before)
		}
	}
}
