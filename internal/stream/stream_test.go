package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

var testGapBounds = DefaultGapBounds

func testConfig(ports ...uint16) Config {
	return Config{
		Ports:           ports,
		MaxSockets:      16384,
		RingBufferBytes: 4 << 20,
		HookOrder:       bpftest.HookOrder(),
		Coalesce:        500 * time.Microsecond,
		FlushInterval:   time.Second,
		ChunkRecords:    true,
		GapBounds:       testGapBounds,
	}
}

// recorder keeps every record of a tracer, by stream.
type recorder struct {
	mu   sync.Mutex
	recs []Record
	done chan struct{}
}

func record(t *testing.T, tr *Tracer) *recorder {
	r := &recorder{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		var rec Record
		for {
			if err := tr.Read(&rec); err != nil {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("Read: %v", err)
				}
				return
			}
			cp := rec
			cp.Data = append([]byte(nil), rec.Data...)
			r.mu.Lock()
			r.recs = append(r.recs, cp)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { tr.Close(); <-r.done })
	return r
}

// ends waits until n END records arrived and returns all records grouped by
// stream, in arrival order.
func (r *recorder) ends(t *testing.T, n int) map[ID][]Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		var got int
		for _, rec := range r.recs {
			if rec.Kind == KindEnd && rec.Stats.HeadersTS != 0 {
				got++
			}
		}
		r.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[ID][]Record{}
	for _, rec := range r.recs {
		out[rec.ID] = append(out[rec.ID], rec)
	}
	return out
}

// sseServer streams events at known times and reports, per request, when
// each flush returned and what it wrote.
type sseServer struct {
	think, interval time.Duration
	events          int
	headersFirst    bool // flush the headers alone before thinking
	done            bool // end with "data: [DONE]" flushed as its own chunk

	mu    sync.Mutex
	start []time.Time   // per request: handler entry (request read)
	first []time.Time   // per request: first event flushed
	flush [][]time.Time // per request: each event flushed
	sizes [][]int       // per request: bytes of each chunk on the wire
	// Per request, per event: CLOCK_MONOTONIC (the kernel's clock) just
	// before and just after the event's write. The kernel's chunk time
	// must fall inside: an exact check that scheduling noise cannot blur.
	before, after [][]uint64
	startMono     []uint64 // per request: CLOCK_MONOTONIC at handler start
	// Per request with headersFirst: CLOCK_MONOTONIC around the headers'
	// flush.
	headBefore, headAfter []uint64
}

func monotonicNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

func (s *sseServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	start, startMono := time.Now(), monotonicNow()
	w.Header().Set("Content-Type", "text/event-stream")
	var headBefore, headAfter uint64
	if s.headersFirst {
		w.WriteHeader(http.StatusOK)
		headBefore = monotonicNow()
		w.(http.Flusher).Flush()
		headAfter = monotonicNow()
	}
	time.Sleep(s.think)
	var flushes []time.Time
	var sizes []int
	var before, after []uint64
	for i := range s.events {
		ev := fmt.Sprintf("data: {\"token\":\"t%d\"}\n\n", i)
		io.WriteString(w, ev)
		before = append(before, monotonicNow())
		w.(http.Flusher).Flush()
		after = append(after, monotonicNow())
		flushes = append(flushes, time.Now())
		sizes = append(sizes, len(fmt.Sprintf("%x", len(ev)))+2+len(ev)+2) // chunked framing
		// A relative sleep: writes that fall behind must not catch up in
		// bursts, which the probe would rightly count as one chunk.
		time.Sleep(s.interval)
	}
	if s.done {
		io.WriteString(w, "data: [DONE]\n\n")
		w.(http.Flusher).Flush()
	}
	s.mu.Lock()
	s.start = append(s.start, start)
	s.first = append(s.first, flushes[0])
	s.flush = append(s.flush, flushes)
	s.sizes = append(s.sizes, sizes)
	s.before = append(s.before, before)
	s.after = append(s.after, after)
	s.startMono = append(s.startMono, startMono)
	s.headBefore = append(s.headBefore, headBefore)
	s.headAfter = append(s.headAfter, headAfter)
	s.mu.Unlock()
}

func serve(t *testing.T, h http.Handler) (addr string, port uint16) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), uint16(ln.Addr().(*net.TCPAddr).Port)
}

func TestSSEStreamIsMeasuredExactly(t *testing.T) {
	bpftest.Require(t)
	for _, headersFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("headersFirst=%v", headersFirst), func(t *testing.T) {
			srv := &sseServer{think: 80 * time.Millisecond, interval: 20 * time.Millisecond, events: 20, headersFirst: headersFirst}
			addr, port := serve(t, srv)
			tr, err := Open(testConfig(port))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tr.HookPoints() {
				t.Logf("%s: %s", p.Name, p.Choice.Summary())
			}
			rec := record(t, tr)

			body := `{"model":"llama-3-8b","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			sent := monotonicNow()
			resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()

			streams := rec.ends(t, 1)
			var got []Record
			for _, rs := range streams {
				for _, r := range rs {
					if r.Kind == KindEnd && r.Stats.HeadersTS != 0 {
						got = rs
					}
				}
			}
			if got == nil {
				t.Fatalf("no completed stream among %d streams", len(streams))
			}
			var end Record
			var chunkTS []uint64
			var sawReq, sawResp bool
			headerLen := 0
			for _, r := range got {
				switch r.Kind {
				case KindEnd:
					end = r
				case KindChunk:
					chunkTS = append(chunkTS, r.Stats.LastChunkTS)
				case KindRequest:
					sawReq = sawReq || bytes.HasPrefix(r.Data, []byte("POST /v1/chat/completions HTTP/1.1"))
				case KindResponse:
					sawResp = r.Flags&RespHTTP != 0
					headerLen = bytes.Index(r.Data, []byte("\r\n\r\n")) + 4
				}
			}
			s := end.Stats
			if !sawReq || !sawResp {
				t.Errorf("request head seen %v, response head seen %v", sawReq, sawResp)
			}
			if end.Reason != EndTerminator {
				t.Errorf("end reason %v, want terminator", end.Reason)
			}
			// The kernel's view: the head write is not a chunk. When the
			// first event went out with the headers, HeadBody recovers it.
			headBody := s.HeadBody(headerLen)
			wantChunks, wantBytes := srv.events, 5 // the 0\r\n\r\n terminator
			for _, n := range srv.sizes[0] {
				wantBytes += n
			}
			firstChunk := s.FirstChunkTS
			if !headersFirst {
				wantChunks--
				wantBytes -= srv.sizes[0][0]
				firstChunk = s.HeadersTS
				if headBody != uint32(srv.sizes[0][0]) {
					t.Errorf("head carried %d body bytes, want the first event's %d", headBody, srv.sizes[0][0])
				}
			} else if headBody != 0 {
				t.Errorf("headers-only head carried %d body bytes", headBody)
			}
			if s.Chunks != uint32(wantChunks) {
				t.Errorf("%d chunks, want %d", s.Chunks, wantChunks)
			}
			if s.Bytes != uint64(wantBytes) {
				t.Errorf("%d body bytes, want %d", s.Bytes, wantBytes)
			}
			// Exact, whatever the scheduling: every kernel stamp falls
			// inside the CLOCK_MONOTONIC bracket of the event it stands
			// for, so TTFT and every interval are exact too. The request
			// reached the socket after the client began to send it and
			// before the handler ran; the time between is queueing in the
			// server that TTFT includes on purpose and the server's own
			// clock cannot see.
			t.Logf("TTFT %v, server-measured think %v; TTFB %v", time.Duration(firstChunk-s.RequestTS),
				srv.first[0].Sub(srv.start[0]), time.Duration(s.HeadersTS-s.RequestTS))
			if s.RequestTS < sent || s.RequestTS > srv.startMono[0] {
				t.Errorf("request stamped at %d, outside [client sent %d, handler started %d]", s.RequestTS, sent, srv.startMono[0])
			}
			headBefore, headAfter := srv.headBefore[0], srv.headAfter[0]
			if !headersFirst { // the head went out with the first event
				headBefore, headAfter = srv.before[0][0], srv.after[0][0]
			}
			if s.HeadersTS < headBefore || s.HeadersTS > headAfter {
				t.Errorf("headers stamped at %d, outside their write [%d, %d]", s.HeadersTS, headBefore, headAfter)
			}
			flushes := srv.flush[0]
			if !headersFirst {
				flushes = flushes[1:] // the first event was in the head
			}
			if len(chunkTS) != len(flushes)-1 {
				t.Fatalf("%d chunk records after the first, want %d", len(chunkTS), len(flushes)-1)
			}
			before, after := srv.before[0], srv.after[0]
			if !headersFirst {
				before, after = before[1:], after[1:]
			}
			for i, ts := range append([]uint64{s.FirstChunkTS}, chunkTS...) {
				if ts < before[i] || ts > after[i] {
					t.Errorf("chunk %d stamped at %d, outside its write [%d, %d]", i, ts, before[i], after[i])
				}
			}
			// The kernel's interval histogram and sum match the stamps.
			prev := s.FirstChunkTS
			var gapSum time.Duration
			var wantCounts [GapBuckets]uint32
			for _, ts := range chunkTS {
				got := time.Duration(ts - prev)
				b := 0
				for b < len(testGapBounds) && got > testGapBounds[b] {
					b++
				}
				wantCounts[b]++
				gapSum += got
				prev = ts
			}
			if time.Duration(s.GapSum) != gapSum {
				t.Errorf("gap sum %v, chunk records add up to %v", time.Duration(s.GapSum), gapSum)
			}
			var counts [GapBuckets]uint32
			for _, r := range got {
				if r.Kind == KindProgress || r.Kind == KindEnd {
					for i, c := range r.Stats.GapCounts {
						counts[i] += c
					}
				}
			}
			if counts != wantCounts {
				t.Errorf("kernel histogram %v, want %v", counts, wantCounts)
			}
		})
	}
}
