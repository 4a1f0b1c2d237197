package stream

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// testGapBounds are 4 ms apart, so that TestSSEStreamIsMeasuredExactly's
// gaps (testGaps) fall in every bucket of the kernel's histogram.
var testGapBounds = func() []time.Duration {
	b := make([]time.Duration, GapBuckets-1)
	for i := range b {
		b[i] = time.Duration(i+1) * 4 * time.Millisecond
	}
	return b
}()

// testGaps are the waits after each event: in the middle of each bucket
// of testGapBounds (2, 6, ... 62 ms, then 70 ms past the last bound), 1,
// 2 or 3 of them in turn, so that no two neighbouring buckets hold as
// many (a search that swapped them would go unseen).
var testGaps = func() []time.Duration {
	var g []time.Duration
	for b := range GapBuckets {
		gap := time.Duration(4*b+2) * time.Millisecond
		if b == GapBuckets-1 {
			gap = 70 * time.Millisecond
		}
		for range b%3 + 1 {
			g = append(g, gap)
		}
	}
	return g
}()

func testConfig(ports ...uint16) Config {
	return Config{
		Ports:           ports,
		MaxSockets:      16384,
		StateSlots:      DefaultStateSlots,
		RingBufferBytes: 4 << 20,
		HookOrder:       bpftest.HookOrder(),
		Coalesce:        500 * time.Microsecond,
		FlushInterval:   time.Second,
		ChunkRecords:    true,
		GapBounds:       testGapBounds,
	}
}

// recorder keeps the records of a test's streams, in arrival order.
type recorder struct {
	// tr is the tracer that reads them: the test's own, or the shared
	// one (trace).
	tr *Tracer
	// lateOthers is tr's count of late records (not ENDs) when the
	// recorder began. On a shared tracer, a late record of the previous
	// test's streams that its reader takes after this count would be
	// blamed on this test: such records come microseconds after their
	// END, which comes at the previous test's end at the latest.
	lateOthers uint64
	// readErr, for a shared tracer, says what stopped its reader.
	readErr func() error
	// since is when a shared tracer began to watch the test's ports
	// (kernel monotonic ns): streams that began earlier are not the
	// test's.
	since uint64
	mu    sync.Mutex
	recs  []Record
}

// add keeps a copy of rec.
func (r *recorder) add(rec *Record) {
	cp := *rec
	cp.Data = append([]byte(nil), rec.Data...)
	r.mu.Lock()
	r.recs = append(r.recs, cp)
	r.mu.Unlock()
}

// record keeps every record of tr, the test's own tracer, until the test
// ends, and closes tr then.
func record(t *testing.T, tr *Tracer) *recorder {
	r := &recorder{tr: tr}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rec Record
		for {
			if err := tr.Read(&rec); err != nil {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("Read: %v", err)
				}
				return
			}
			r.add(&rec)
		}
	}()
	t.Cleanup(func() { tr.Close(); <-done })
	return r
}

// traceWith opens a tracer of the test's own with cfg, and records what it
// reads until the test ends. Tests that read the tracer's counters or
// state, or need another configuration than testConfig's, use it;
// the others share one tracer (trace).
func traceWith(t *testing.T, cfg Config) (*Tracer, *recorder) {
	t.Helper()
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr, record(t, tr)
}

// endIDs waits, at most 5 s, until n streams' responses ended (END
// records), and returns those streams.
func (r *recorder) endIDs(n int) map[ID]bool {
	return r.endedIDs(n, true)
}

// endedIDs is endIDs, counting streams that ended with no response too
// unless answeredOnly.
func (r *recorder) endedIDs(n int, answeredOnly bool) map[ID]bool {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ids := map[ID]bool{}
		r.mu.Lock()
		for _, rec := range r.recs {
			if rec.Kind == KindEnd && (rec.Stats.HeadersTS != 0 || !answeredOnly) {
				ids[rec.ID] = true
			}
		}
		r.mu.Unlock()
		if len(ids) >= n || time.Now().After(deadline) {
			return ids
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ends waits until n streams' responses ended, and 100 ms more for records that
// should not come, and returns all records grouped by stream, in arrival
// order.
func (r *recorder) ends(t *testing.T, n int) map[ID][]Record {
	t.Helper()
	r.endIDs(n)
	return r.settled(t)
}

// allEnds is ends, counting streams that ended with no response too.
func (r *recorder) allEnds(t *testing.T, n int) map[ID][]Record {
	t.Helper()
	r.endedIDs(n, false)
	return r.settled(t)
}

// settled waits 100 ms for records that should not come, and returns all
// records grouped by stream, in arrival order.
func (r *recorder) settled(t *testing.T) map[ID][]Record {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	// Read drops what comes after a stream's END; a second END can come
	// of a write's race with a close, another kind should not.
	if _, others := r.tr.LateRecords(); others != r.lateOthers {
		t.Errorf("%d records (not ENDs) came after their stream's END", others-r.lateOthers)
	}
	if r.readErr != nil {
		if err := r.readErr(); err != nil {
			t.Errorf("the shared tracer's Read: %v", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[ID][]Record{}
	for _, rec := range r.recs {
		if prev := out[rec.ID]; len(prev) > 0 && prev[len(prev)-1].Kind == KindEnd {
			t.Errorf("stream %v: %v record after its END", rec.ID, rec.Kind)
		}
		out[rec.ID] = append(out[rec.ID], rec)
	}
	return out
}

// serve serves h on a 127.0.0.1 port until the test ends.
func serve(t *testing.T, h http.Handler) (addr string, port uint16) {
	t.Helper()
	s := teststack.ServeHTTP(t, h)
	return s.Addr, uint16(s.Port)
}

func TestSSEStreamIsMeasuredExactly(t *testing.T) {
	bpftest.Require(t)
	for _, headersFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("headersFirst=%v", headersFirst), func(t *testing.T) {
			srv := &teststack.SSEServer{Think: 80 * time.Millisecond, Interval: 20 * time.Millisecond, Gaps: testGaps,
				Events: len(testGaps) + 2, HeadersFirst: headersFirst}
			addr, port := serve(t, srv)
			rec := trace(t, port)
			for _, p := range rec.tr.HookPoints() {
				t.Logf("%s: %s", p.Name, p.Choice.Summary())
			}

			body := `{"model":"llama-3-8b","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			sent := teststack.MonotonicNow()
			if err := teststack.Fetch(nil, "POST", "http://"+addr+"/v1/chat/completions", body); err != nil {
				t.Fatal(err)
			}

			streams := rec.ends(t, 1)
			w := srv.Written()[0]
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
			wantChunks, wantBytes := srv.Events, 5 // the 0\r\n\r\n terminator
			for _, n := range w.Sizes {
				wantBytes += n
			}
			firstChunk := s.FirstChunkTS
			if !headersFirst {
				wantChunks--
				wantBytes -= w.Sizes[0]
				firstChunk = s.HeadersTS
				if headBody != uint32(w.Sizes[0]) {
					t.Errorf("head carried %d body bytes, want the first event's %d", headBody, w.Sizes[0])
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
				w.First().Sub(w.Start), time.Duration(s.HeadersTS-s.RequestTS))
			if s.RequestTS < sent || s.RequestTS > w.StartMono {
				t.Errorf("request stamped at %d, outside [client sent %d, handler started %d]", s.RequestTS, sent, w.StartMono)
			}
			headBefore, headAfter := w.HeadBefore, w.HeadAfter
			if !headersFirst { // the head went out with the first event
				headBefore, headAfter = w.Before[0], w.After[0]
			}
			if s.HeadersTS < headBefore || s.HeadersTS > headAfter {
				t.Errorf("headers stamped at %d, outside their write [%d, %d]", s.HeadersTS, headBefore, headAfter)
			}
			flushes := w.Flushed
			if !headersFirst {
				flushes = flushes[1:] // the first event was in the head
			}
			if len(chunkTS) != len(flushes)-1 {
				t.Fatalf("%d chunk records after the first, want %d", len(chunkTS), len(flushes)-1)
			}
			before, after := w.Before, w.After
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
			// The gaps cross every bound, so the kernel's search took most
			// of its branches; a late writer moves some to the next bucket.
			hit := 0
			for _, c := range counts {
				if c > 0 {
					hit++
				}
			}
			if hit <= GapBuckets/2 {
				t.Errorf("the gaps fell in %d buckets of %d (%v): too few to check the kernel's search", hit, GapBuckets, counts)
			}
		})
	}
}
