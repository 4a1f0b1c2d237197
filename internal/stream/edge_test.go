package stream

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// completed returns the END records of streams that got a response.
func completed(streams map[ID][]Record) []Record {
	var out []Record
	for _, rs := range streams {
		for _, r := range rs {
			if r.Kind == KindEnd && r.Stats.HeadersTS != 0 {
				out = append(out, r)
			}
		}
	}
	return out
}

// requireCompleted returns the END records of streams that got a
// response, and fails the test with every record of every stream when
// there are not exactly n of them.
func requireCompleted(t *testing.T, streams map[ID][]Record, n int) []Record {
	t.Helper()
	ends := completed(streams)
	if len(ends) == n {
		return ends
	}
	for id, rs := range streams {
		for _, r := range rs {
			t.Logf("stream %v: %v reason %v stats %+v data %q", id, r.Kind, r.Reason, r.Stats, r.Data)
		}
	}
	t.Fatalf("%d completed streams, want %d", len(ends), n)
	return nil
}

func TestHeadersThenEventsInSeparateWrites(t *testing.T) {
	bpftest.Require(t)
	events := []string{"data: a\n\n", "data: bb\n\n", "data: ccc\n\n", "data: dddd\n\n"}
	const think = 60 * time.Millisecond
	raw := teststack.ServeRaw(t, think, 15*time.Millisecond, events)
	addr, port := raw.Addr, raw.Port
	rec := trace(t, port)
	if err := teststack.Fetch(nil, "GET", "http://"+addr+"/stream", ""); err != nil {
		t.Fatal(err)
	}
	m := <-raw.Measured

	ends := requireCompleted(t, rec.ends(t, 1), 1)
	s := ends[0].Stats
	if s.Chunks != uint32(len(events)) {
		t.Errorf("%d chunks, want %d (the headers-only write is not a chunk)", s.Chunks, len(events))
	}
	want := 0
	for _, ev := range events {
		want += len(ev)
	}
	if s.Bytes != uint64(want) {
		t.Errorf("%d body bytes, want %d", s.Bytes, want)
	}
	ttfb, ttft := time.Duration(s.HeadersTS-s.RequestTS), time.Duration(s.FirstChunkTS-s.RequestTS)
	t.Logf("TTFB %v, TTFT %v, server: head write [%d,%d], first event write [%d,%d]; kernel: head %d, first chunk %d",
		ttfb, ttft, m[0], m[1], s.HeadersTS, m[2], m[3], s.FirstChunkTS)
	// Exact: each time stamped while its write ran.
	if s.HeadersTS < m[0] || s.HeadersTS > m[1] {
		t.Errorf("head stamped outside its write")
	}
	if s.FirstChunkTS < m[2] || s.FirstChunkTS > m[3] {
		t.Errorf("first chunk stamped outside its write")
	}
	if ttft-ttfb < think {
		t.Errorf("TTFT-TTFB %v is shorter than the server's think time %v", ttft-ttfb, think)
	}
	if ends[0].Reason != EndClose {
		t.Errorf("end reason %v, want close (close-delimited body)", ends[0].Reason)
	}
}

func TestLargeChunkIsOneChunk(t *testing.T) {
	bpftest.Require(t)
	big := strings.Repeat("x", 64<<10)
	events := []string{"data: " + big + "\n\n", "data: small\n\n"}
	raw := teststack.ServeRaw(t, 10*time.Millisecond, 20*time.Millisecond, events)
	addr, port := raw.Addr, raw.Port
	rec := trace(t, port)
	if err := teststack.Fetch(nil, "GET", "http://"+addr+"/", ""); err != nil {
		t.Fatal(err)
	}
	ends := requireCompleted(t, rec.ends(t, 1), 1)
	if s := ends[0].Stats; s.Chunks != 2 || s.Bytes != uint64(len(events[0])+len(events[1])) {
		t.Fatalf("%d chunks, %d bytes; want 2 chunks, %d bytes", s.Chunks, s.Bytes, len(events[0])+len(events[1]))
	}
}

func TestClientAbortEndsThePartialStream(t *testing.T) {
	bpftest.Require(t)
	srv := &teststack.SSEServer{Think: 10 * time.Millisecond, Interval: 20 * time.Millisecond, Events: 50, HeadersFirst: true}
	addr, port := serve(t, srv)
	rec := trace(t, port)
	conn, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	seen := 0
	for seen < 3 { // read three events, then hang up
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			seen++
		}
	}
	conn.Close()
	ends := requireCompleted(t, rec.ends(t, 1), 1)
	e := ends[0]
	t.Logf("ended by %v after %d chunks", e.Reason, e.Stats.Chunks)
	if e.Reason != EndClientClosed && e.Reason != EndReset {
		t.Errorf("end reason %v, want client_closed or reset", e.Reason)
	}
	if e.Stats.Chunks < 3 || e.Stats.Chunks >= 50 {
		t.Errorf("%d chunks: want the partial count (3 or a few more in flight)", e.Stats.Chunks)
	}
}

func TestKeepAliveRequestsAreSeparateStreams(t *testing.T) {
	bpftest.Require(t)
	srv := &teststack.SSEServer{Think: 5 * time.Millisecond, Interval: 5 * time.Millisecond, Events: 4, HeadersFirst: true}
	addr, port := serve(t, srv)
	rec := trace(t, port)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	for range 3 {
		if err := teststack.Fetch(client, "POST", "http://"+addr+"/", "{}"); err != nil {
			t.Fatal(err)
		}
	}
	ends := requireCompleted(t, rec.ends(t, 3), 3)
	socks := map[uint64]bool{}
	seqs := map[uint32]bool{}
	for _, e := range ends {
		socks[e.ID.Sock] = true
		seqs[e.ID.Seq] = true
		if e.Stats.Chunks != 4 || e.Reason != EndTerminator {
			t.Errorf("stream %+v: %d chunks, end %v; want 4, terminator", e.ID, e.Stats.Chunks, e.Reason)
		}
	}
	if len(socks) != 1 || len(seqs) != 3 {
		t.Errorf("%d sockets, %d sequence numbers; want 1 socket carrying 3 streams", len(socks), len(seqs))
	}
}

func TestConcurrentStreamsAllReported(t *testing.T) {
	bpftest.Require(t)
	const n, events = 200, 10
	srv := &teststack.SSEServer{Think: 20 * time.Millisecond, Interval: 20 * time.Millisecond, Events: events, HeadersFirst: true}
	addr, port := serve(t, srv)
	tr, rec := traceWith(t, testConfig(port))
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n}}
	if err := teststack.FetchAll(client, n, "GET", "http://"+addr+"/", ""); err != nil {
		t.Fatal(err)
	}
	ends := requireCompleted(t, rec.ends(t, n), n)
	var wantBytes uint64
	for _, sz := range srv.Written()[0].Sizes {
		wantBytes += uint64(sz)
	}
	wantBytes += 5
	for _, e := range ends {
		if e.Stats.Chunks != events || e.Stats.Bytes != wantBytes || e.Reason != EndTerminator {
			t.Fatalf("stream %+v: %d chunks, %d bytes, end %v; want %d, %d, terminator", e.ID, e.Stats.Chunks, e.Stats.Bytes, e.Reason, events, wantBytes)
		}
	}
	c, err := tr.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.RecordsLost != 0 {
		t.Fatalf("%d records lost", c.RecordsLost)
	}
}

func TestSocketStateIsRemovedOnClose(t *testing.T) {
	bpftest.Require(t)
	srv := &teststack.SSEServer{Think: time.Millisecond, Interval: time.Millisecond, Events: 2, HeadersFirst: true}
	addr, port := serve(t, srv)
	tr, rec := traceWith(t, testConfig(port))
	for range 20 {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		if err := teststack.Fetch(client, "GET", "http://"+addr+"/", ""); err != nil {
			t.Fatal(err)
		}
	}
	rec.ends(t, 20)
	var left int
	var err error
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if left, err = tr.Sockets(); err != nil || left == 0 {
			break
		}
	}
	if left != 0 {
		t.Fatalf("%d sockets still tracked after every connection closed", left)
	}
}

// kindOffset is where a record's kind sits (struct stream_key).
const kindOffset = unsafe.Offsetof(bpf.StreamStreamKey{}.Kind)

func TestDecodeAllocatesNothing(t *testing.T) {
	raw := make([]byte, statsSize)
	raw[kindOffset] = byte(KindProgress)
	var rec Record
	if n := testing.AllocsPerRun(1000, func() { _ = Decode(raw, &rec) }); n != 0 {
		t.Fatalf("Decode allocates %v times per record", n)
	}
	raw = make([]byte, payloadSize)
	raw[kindOffset] = byte(KindRequest)
	if n := testing.AllocsPerRun(1000, func() { _ = Decode(raw, &rec) }); n != 0 {
		t.Fatalf("Decode allocates %v times per payload record", n)
	}
	if err := Decode(raw[:10], &rec); err == nil {
		t.Fatal("Decode accepted a short record")
	}
	raw[kindOffset] = 99
	if err := Decode(raw, &rec); err == nil || !strings.Contains(err.Error(), "unknown") {
		t.Fatalf("Decode of an unknown kind: %v", err)
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, kind := range []Kind{KindProgress, KindRequest} {
		b.Run(fmt.Sprint(kind), func(b *testing.B) {
			raw := make([]byte, payloadSize)
			raw[kindOffset] = byte(kind)
			var rec Record
			b.ReportAllocs()
			for b.Loop() {
				if err := Decode(raw, &rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDoneEventInAChunkedBody: "data: [DONE]" flushed as its own chunk of
// a chunked body (as Go and uvicorn servers send it) ends the stream and is
// not a chunk.
func TestDoneEventInAChunkedBody(t *testing.T) {
	bpftest.Require(t)
	srv := &teststack.SSEServer{Think: 5 * time.Millisecond, Interval: 5 * time.Millisecond, Events: 4, HeadersFirst: true, Done: teststack.DoneFlushed}
	addr, port := serve(t, srv)
	rec := trace(t, port)
	if err := teststack.Fetch(nil, "GET", "http://"+addr+"/", ""); err != nil {
		t.Fatal(err)
	}
	ends := requireCompleted(t, rec.ends(t, 1), 1)
	if e := ends[0]; e.Stats.Chunks != 4 || e.Reason != EndTerminator {
		t.Fatalf("%d chunks, end %v; want 4 chunks ended by the [DONE] event", e.Stats.Chunks, e.Reason)
	}
}

// TestChunkedResponseInOneWriteEnds: a non-streamed answer that Go's
// net/http sends chunked (over 2 KiB, the handler never flushes) and
// whole in one write (under its 4 KiB buffer: head, body and terminator)
// ends at that write, so the next request on the keep-alive connection is
// a stream of its own: over plaintext, and over Go's crypto/tls, whose
// Write the uprobes read.
func TestChunkedResponseInOneWriteEnds(t *testing.T) {
	bpftest.Require(t)
	body := []byte(`{"id":"cmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("token ", 500) + `"},"finish_reason":"stop"}]}`)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			var (
				url    string
				client *http.Client
				rec    *recorder
			)
			if tls {
				cert := teststack.MakeTLSCert(t)
				srv := teststack.ServeHTTPS(t, cert, h)
				cfg := tlsTestConfig(t, true)
				cfg.Ports = []uint16{uint16(srv.Port)}
				var tr *Tracer
				tr, rec = traceTLSWith(t, cfg)
				waitProbed(t, tr, os.Getpid())
				url, client = srv.URL, cert.HTTPClient(true)
			} else {
				addr, port := serve(t, h)
				rec = trace(t, port)
				url, client = "http://"+addr, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			}
			const calls = 3
			for range calls {
				resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !bytes.Equal(got, body) || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
					t.Fatalf("response %d bytes, transfer encoding %v, %v: want the %d-byte body, chunked", len(got), resp.TransferEncoding, err, len(body))
				}
			}
			ends := requireCompleted(t, rec.ends(t, calls), calls)
			socks, seqs := map[uint64]bool{}, map[uint32]bool{}
			// The head write carried it all: no chunk after it, and the
			// body, its chunk framing and the terminator in its bytes.
			minHead := uint32(len(body) + len(fmt.Sprintf("%x\r\n\r\n0\r\n\r\n", len(body))) + len("HTTP/1.1 200 OK\r\n\r\n"))
			for _, e := range ends {
				socks[e.ID.Sock], seqs[e.ID.Seq] = true, true
				if e.Reason != EndTerminator || e.Stats.Chunks != 0 || e.Stats.HeadBytes < minHead || e.Stats.HeadBytes > minHead+512 {
					t.Errorf("stream %+v: ended by %v, %d chunks, %d bytes in its head write; want the terminator, 0, %d to %d",
						e.ID, e.Reason, e.Stats.Chunks, e.Stats.HeadBytes, minHead, minHead+512)
				}
			}
			if len(socks) != 1 || len(seqs) != calls {
				t.Errorf("%d sockets, %d streams; want one keep-alive connection carrying %d: %v", len(socks), len(seqs), calls, ends)
			}
		})
	}
}

// A flood of requests to capture while the reader is behind: once the ring
// is three quarters full their payload records are shed, and every
// stream's END still finds room in the last quarter. Without that room,
// the request bytes filled the ring and ENDs were lost with them. Response
// heads are kept: whole (up to HeadMax bytes) while the ring has room for
// payloads, their first PeekMax bytes past it, so that heads of 1.5 KiB
// (a gateway relaying a hosted API's headers) leave the ENDs their room
// too.
func TestFloodShedsPayloadsAndKeepsEnds(t *testing.T) {
	bpftest.Require(t)
	const n = 40
	for _, c := range []struct {
		name       string
		pad        int // bytes of an extra response header
		ring, body int
	}{
		{"short heads", 0, 128 << 10, 8 << 10},
		{"heads of 1.5 KiB", 1500, 256 << 10, 16 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &teststack.SSEServer{Think: time.Millisecond, Interval: time.Millisecond, Events: 2, HeadersFirst: true}
			if c.pad > 0 {
				srv.Header = http.Header{"X-Pad": {strings.Repeat("p", c.pad)}}
			}
			addr, port := serve(t, srv)
			cfg := testConfig(port)
			cfg.RingBufferBytes = uint32(c.ring)
			cfg.RequestCaptureBytes = uint32(c.body)
			cfg.ChunkRecords = false
			// The flood's ENDs, a PROGRESS per stream and its response
			// heads (the Go server's are under 256 bytes, and at most
			// PeekMax past the room for payloads) fit the quarter kept for
			// them; its request bytes are several times the ring.
			head := 256
			if c.pad > 0 {
				head = PeekMax
			}
			kept := n * (2*(binary.Size(bpf.StreamStreamStats{})+8) + binary.Size(bpf.StreamStreamPayload{}) + head + 8)
			if kept > c.ring/4 || n*c.body < 2*c.ring {
				t.Fatalf("the flood does not fit the test: %d bytes kept, %d of requests", kept, n*c.body)
			}
			tr, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{}
			payload := `{"model":"m","stream":true,"pad":"` + strings.Repeat("x", c.body) + `"}`
			for range n { // with nothing reading the ring
				if err := teststack.Fetch(client, "POST", "http://"+addr+"/", payload); err != nil {
					t.Fatal(err)
				}
			}
			rec := record(t, tr)
			streams := rec.ends(t, n)
			ends := requireCompleted(t, streams, n)
			for _, e := range ends {
				// Behind a head whose "chunked" is past the first
				// PeekMax bytes, the kernel's look, a next request that
				// overtakes the report of the terminator's write ends
				// the stream (docs/measurements.md), with the same chunks.
				end := e.Reason == EndTerminator || c.pad > 0 && e.Reason == EndNextRequest
				if e.Stats.Chunks != 2 || !end {
					t.Errorf("stream %+v: %d chunks, end %v; want 2, terminator", e.ID, e.Stats.Chunks, e.Reason)
				}
			}
			whole, cut := 0, 0
			for id, recs := range streams {
				for _, r := range recs {
					switch {
					case r.Kind != KindResponse:
					case int(r.Total) == len(r.Data):
						whole++
					case len(r.Data) == PeekMax:
						cut++
					default:
						t.Errorf("stream %+v: %d of its head's %d bytes recorded", id, len(r.Data), r.Total)
					}
				}
			}
			if whole+cut != n || c.pad > 0 && (whole == 0 || cut == 0) || c.pad == 0 && cut != 0 {
				t.Errorf("%d heads whole, %d cut to %d bytes, of %d streams", whole, cut, PeekMax, n)
			}
			counters, err := tr.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if counters.RecordsLost != 0 || counters.Shed == 0 {
				t.Errorf("%d records lost, %d payloads shed; want none lost, some shed", counters.RecordsLost, counters.Shed)
			}
			t.Logf("%d payload records shed; %d heads whole, %d cut", counters.Shed, whole, cut)
		})
	}
}
