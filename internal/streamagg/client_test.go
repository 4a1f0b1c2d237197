package streamagg

import (
	"strings"
	"testing"

	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
)

func TestHostOf(t *testing.T) {
	for head, want := range map[string]string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n\r\n":        "api.openai.com",
		"POST / HTTP/1.1\r\nhost:localhost:11434\r\nAccept: */*\r\n\r\n":            "localhost",
		"POST / HTTP/1.1\r\nHOST: [::1]:8000\r\n\r\n":                               "::1",
		"POST / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n":                                "192.0.2.1",
		"POST / HTTP/1.1\r\nX-Host: evil\r\n\r\n":                                   "",
		"POST / HTTP/1.1\r\nContent-Type: a\r\n\r\nHost: in.the.body\r\n":           "",
		"POST / HTTP/1.1\r\nHost: \r\n\r\n":                                         "",
		"POST / HTTP/1.1\r\nHost: [::1\r\n\r\n":                                     "",
		"POST / HTTP/1.1\r\nUser-Agent: x\r\nHost: api.anthropic.com:443\r\n\r\n{}": "api.anthropic.com",
	} {
		if got := string(hostOf([]byte(head))); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", head, got, want)
		}
	}
}

// clientCall is a call this host made with host as its Host header: a
// head, then three chunks.
func clientCall(host string, seq uint32) streamaggtest.Stream {
	return streamaggtest.Stream{PID: 42, Seq: seq, ClientCall: true,
		Request:   "POST /v1/chat/completions HTTP/1.1\r\nHost: " + host + "\r\n\r\n{\"model\":\"gpt-x\",\"stream\":true}",
		Head:      streamaggtest.SSEHead,
		HeadBytes: uint32(len(streamaggtest.SSEHead)), HeadAt: 20, ChunkAt: []uint64{30, 40, 50}, ChunkBytes: 10}
}

// TestClientSeries: a client call's series is the server's port and
// address with the GenAI attributes and no HTTP route; its span names the
// server; streams.clients.hosts drops the calls to other hosts, and the
// servers' process filter does not apply to clients.
func TestClientSeries(t *testing.T) {
	var skipped []string
	a, err := New(Config{MaxOpen: 16, MaxPaths: 8, MaxModels: 8, MaxSeries: 16, Spans: true,
		ProcessNames: []string{"vllm"}, ClientHosts: []string{"api.example.test"},
		OnSkip: func(r string) { skipped = append(skipped, r) }}, procinfo.NewCache(16))
	if err != nil {
		t.Fatal(err)
	}
	for i, host := range []string{"api.example.test:443", "other.test", "api.example.test"} {
		recs := clientCall(host, uint32(i+1)).Records(IntervalBounds)
		for j := range recs {
			a.Add(&recs[j])
		}
	}
	if len(skipped) != 1 || skipped[0] != SkipFiltered {
		t.Errorf("skipped %v, want the call to other.test filtered", skipped)
	}
	snap := a.Snapshot()
	if len(snap) != 1 {
		t.Fatalf("%d series, want 1: %+v", len(snap), snap)
	}
	k := snap[0].Key
	if !k.Client || k.Port != streamaggtest.Server.Port() || k.ServerAddress != "api.example.test" ||
		k.Method != "" || k.Route != "" || k.Model != "gpt-x" || k.Operation != "chat" {
		t.Errorf("client series key %+v", k)
	}
	s := snap[0].Series
	if s.TTFT.Count != 2 || s.Duration.Count != 2 || len(s.TTFT.Counts) != len(TTFCBounds)+1 {
		t.Errorf("client series: %d times to first chunk (%d buckets), %d durations", s.TTFT.Count, len(s.TTFT.Counts), s.Duration.Count)
	}
	spans := a.TakeSpans(nil)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, sp := range spans {
		if !sp.ClientCall || sp.ServerAddress != "api.example.test" || sp.Server != streamaggtest.Server ||
			sp.Client.IsValid() || sp.Method != "POST" || sp.Chunks != 3 {
			t.Errorf("client span %+v", sp)
		}
	}
}

// A streamed 4xx fails a client's span, and leaves a server's unset, as
// the HTTP conventions have it; both carry error.type.
func TestClientErrorStatus(t *testing.T) {
	a, err := New(Config{MaxOpen: 16, MaxPaths: 8, MaxModels: 8, MaxSeries: 16, Spans: true}, procinfo.NewCache(16))
	if err != nil {
		t.Fatal(err)
	}
	head := strings.Replace(streamaggtest.SSEHead, "200 OK", "429 Too Many Requests", 1)
	for i, client := range []bool{true, false} {
		s := clientCall("api.example.test", uint32(i+1))
		s.Sock, s.ClientCall, s.Head, s.HeadBytes = uint64(i), client, head, uint32(len(head))
		recs := s.Records(IntervalBounds)
		for j := range recs {
			a.Add(&recs[j])
		}
	}
	spans := a.TakeSpans(nil)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, sp := range spans {
		if sp.ErrorType != "429" || sp.Failed != sp.ClientCall {
			t.Errorf("client %v: error.type %q, failed %v; want 429, failed only for the client", sp.ClientCall, sp.ErrorType, sp.Failed)
		}
	}
}

// TestClientServerNameFromHello: a client call whose request is not read
// (timed from its TLS records: no Host header) has for server.address the
// server name its connection's ClientHello asked for, which
// streams.clients.hosts then selects by; a connection with no name has
// the server's IP, and a closed connection's name is forgotten.
func TestClientServerNameFromHello(t *testing.T) {
	hello, err := streamaggtest.ClientHello("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	var skipped []string
	a, err := New(Config{MaxOpen: 16, MaxPaths: 8, MaxModels: 8, MaxSeries: 16, Spans: true,
		ClientHosts: []string{"api.example.test"}, OnSkip: func(r string) { skipped = append(skipped, r) }},
		procinfo.NewCache(16))
	if err != nil {
		t.Fatal(err)
	}
	opaque := func(sock uint64, seq uint32, reason stream.EndReason) {
		recs := streamaggtest.Stream{PID: 42, Sock: sock, Seq: seq, ClientCall: true,
			HeadAt: 20, ChunkAt: []uint64{20, 30, 40}, ChunkBytes: 10}.Records(IntervalBounds)
		recs[len(recs)-1].Reason = reason
		for i := range recs {
			a.Add(&recs[i])
		}
	}
	id := streamaggtest.Stream{Sock: 1, Seq: 1}.Records(nil)[0].ID
	a.Add(&stream.Record{Kind: stream.KindTLSHello, ID: id, Data: hello})
	opaque(1, 1, stream.EndNextRequest) // named by its hello
	opaque(2, 1, stream.EndClose)       // no hello: the IP, filtered
	opaque(1, 2, stream.EndClose)       // named, and the connection closes
	opaque(1, 3, stream.EndClose)       // its name forgotten: filtered
	if len(skipped) != 2 || skipped[0] != SkipFiltered || skipped[1] != SkipFiltered {
		t.Errorf("skipped %v, want the two calls with no server name filtered", skipped)
	}
	spans := a.TakeSpans(nil)
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	for _, sp := range spans {
		if !sp.ClientCall || sp.ServerAddress != "api.example.test" || sp.Chunks != 3 {
			t.Errorf("client span %+v", sp)
		}
	}
	if len(a.serverNames) != 0 {
		t.Errorf("%d server names kept after their connections closed", len(a.serverNames))
	}
}
