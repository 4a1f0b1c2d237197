package streamagg

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

const sseHead = streamaggtest.SSEHead

func mustNew(cfg Config) *Aggregator {
	a, err := New(cfg, procinfo.NewCache(16))
	if err != nil {
		panic(err)
	}
	return a
}

func testConfig() Config {
	return Config{MaxOpen: 16384, MaxPaths: 100, MaxModels: 100, Spans: true}
}

// harness feeds an aggregator whole streams and counts its skips.
type harness struct {
	a     *Aggregator
	pid   uint32
	skips map[string]int
}

func newHarness(cfg Config) *harness {
	h := &harness{pid: uint32(os.Getpid()), skips: map[string]int{}}
	cfg.OnSkip = func(r string) { h.skips[r]++ }
	h.a = mustNew(cfg)
	return h
}

func (h *harness) run(s streamaggtest.Stream) {
	if s.PID == 0 {
		s.PID = h.pid
	}
	recs := s.Records(IntervalBounds)
	for i := range recs {
		h.a.Add(&recs[i])
	}
}

// series returns the series whose path and model are as given.
func (h *harness) series(t *testing.T, path, model string) Series {
	t.Helper()
	for _, s := range h.a.Snapshot() {
		if s.Key.Route == path && s.Key.Model == model {
			return s.Series
		}
	}
	t.Fatalf("no series for path %q model %q", path, model)
	return Series{}
}

func (h *harness) total() (chunks int64) {
	for _, s := range h.a.Snapshot() {
		chunks += s.Chunks
	}
	return chunks
}

func TestHeadWithFirstEventIsTheFirstChunk(t *testing.T) {
	h := newHarness(testConfig())
	first := "17\r\ndata: {\"t\":\"hello\"}\n\n\r\n"
	// Headers and the first event in one write at 80 ms; the kernel then
	// sees chunks at 100, 120, 140 ms.
	h.run(streamaggtest.Stream{Request: "POST /v1/chat/completions HTTP/1.1\r\n\r\n{\"model\":\"m\"}",
		Head: sseHead + first, HeadBytes: uint32(len(sseHead) + len(first)), HeadAt: 80,
		ChunkAt: []uint64{100, 120, 140}, ChunkBytes: 30})
	s := h.series(t, "/v1/chat/completions", "m")
	require.EqualValues(t, 4, s.Chunks)
	require.EqualValues(t, len(first)+3*30, s.Bytes)
	require.EqualValues(t, 3, s.Interval.Count, "80->100 from the head, then 100->120->140")
	require.InDelta(t, 0.080, s.TTFT.Sum, 1e-9, "TTFT is the head write")
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 1)
	require.EqualValues(t, 4, spans[0].Chunks)
	require.EqualValues(t, 80*time.Millisecond, spans[0].FirstChunk-spans[0].Start)
	require.Equal(t, streamaggtest.Client, spans[0].Client)
	require.Equal(t, "POST", spans[0].Method)
	require.Equal(t, "m", spans[0].Model)
}

// A first chunk closer to the head's write than the kernel's Coalesce is
// part of the chunk the head's body bytes began, as two such writes are
// one chunk in the kernel: 3 chunks, not 4, the bytes all counted, no
// interval between the two.
func TestFirstChunkWithinCoalesceOfTheHeadIsTheSameChunk(t *testing.T) {
	cfg := testConfig()
	cfg.Coalesce = 5 * time.Millisecond
	h := newHarness(cfg)
	first := "17\r\ndata: {\"t\":\"hello\"}\n\n\r\n"
	h.run(streamaggtest.Stream{Request: "POST /v1/chat/completions HTTP/1.1\r\n\r\n{\"model\":\"m\"}",
		Head: sseHead + first, HeadBytes: uint32(len(sseHead) + len(first)), HeadAt: 80,
		ChunkAt: []uint64{82, 120, 140}, ChunkBytes: 30})
	s := h.series(t, "/v1/chat/completions", "m")
	require.EqualValues(t, 3, s.Chunks)
	require.EqualValues(t, len(first)+3*30, s.Bytes)
	require.EqualValues(t, 2, s.Interval.Count, "82->120->140")
	require.InDelta(t, 0.080, s.TTFT.Sum, 1e-9, "TTFT is the head write")
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 1)
	require.EqualValues(t, 3, spans[0].Chunks)
	require.EqualValues(t, len(first)+3*30, spans[0].Bytes)
	// The kernel times the next interval from its first chunk's write
	// (82), not from the head's (80): less than Coalesce short.
	require.EqualValues(t, 38*time.Millisecond, spans[0].GapMax)
}

// A client's read of the head that ends inside the first event (a TLS
// record cut there: Go's crypto/tls sends records of about 1.2 KiB at a
// connection's start) leaves that line for the next read, the first body
// write, to finish: the event is read whole, across the two records.
func TestFirstEventSplitAfterTheHeadIsReadWhole(t *testing.T) {
	h := newHarness(testConfig())
	event := llmwire.Chunked(llmwire.AnthropicDocsStart)
	cut := strings.Index(event, `"message"`) + 4
	for _, c := range []struct {
		name      string
		headBytes int
		offset    uint32
		model     string
	}{
		{"all the read", len(sseHead) + cut, 0, "claude-3-5-sonnet-20241022"},
		{"the record cut before the read's end", len(sseHead) + cut + 100, 0, ""},
		{"the first body record after a buffer of framing", len(sseHead) + cut, 2, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.run(streamaggtest.Stream{Request: "POST /v1/messages HTTP/1.1\r\n\r\n{\"model\":\"c\"}",
				Head: sseHead + event[:cut], HeadBytes: uint32(c.headBytes), HeadAt: 80,
				FirstBody: streamaggtest.FirstOf(event[cut:]), FirstBodyOffset: c.offset,
				ChunkAt: []uint64{81, 120}, ChunkBytes: 30})
			spans := h.a.TakeSpans(nil)
			require.Len(t, spans, 1)
			require.Equal(t, c.model, spans[0].ResponseModel)
			if c.model != "" {
				require.Equal(t, "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", spans[0].ResponseID)
			}
		})
	}
}

func TestHeadersOnlyHeadIsNotAChunk(t *testing.T) {
	h := newHarness(testConfig())
	h.run(streamaggtest.Stream{Request: "GET /stream HTTP/1.1\r\n\r\n", Head: sseHead, HeadBytes: uint32(len(sseHead)),
		HeadAt: 1, ChunkAt: []uint64{50, 60}, ChunkBytes: 10})
	s := h.series(t, "/stream", "")
	require.EqualValues(t, 2, s.Chunks)
	require.InDelta(t, 0.050, s.TTFT.Sum, 1e-9)
}

// A head longer than its record (stream.HeadMax bytes) is cut before its
// end: what it says past the cut is unknown. It is a stream unless what
// the record holds says otherwise (a Content-Length), and none of the
// write's bytes are taken as body. A head that ended before its end
// because its write did (a client's read of part of it) is read as it is.
func TestCutHeadIsAStreamUnlessItSaysOtherwise(t *testing.T) {
	long := "X-Upstream-Header: " + strings.Repeat("v", stream.HeadMax) + "\r\n"
	for _, c := range []struct {
		name, head string
		streamed   bool
	}{
		{"its Content-Type past the cut", "HTTP/1.1 200 OK\r\n" + long + sseHead[len("HTTP/1.1 200 OK\r\n"):], true},
		{"a Content-Length before the cut", "HTTP/1.1 200 OK\r\nContent-Length: 9000\r\n" + long + "\r\n", false},
		{"a whole head that names neither", "HTTP/1.1 200 OK\r\nX-A: b\r\n\r\n", false},
		{"a read that ended in the head", "HTTP/1.1 200 OK\r\nX-A: b\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(testConfig())
			head := c.head[:min(len(c.head), stream.HeadMax)]
			total := uint32(len(c.head))
			if strings.HasSuffix(c.head, "\r\n\r\n") {
				total += 40 // body bytes after a whole head
			}
			h.run(streamaggtest.Stream{Request: "GET /stream HTTP/1.1\r\n\r\n", Head: head, HeadBytes: total,
				HeadAt: 1, ChunkAt: []uint64{50, 60}, ChunkBytes: 10})
			if !c.streamed {
				require.Equal(t, 1, h.skips[SkipNotStreamed])
				return
			}
			require.Zero(t, h.skips[SkipNotStreamed])
			s := h.series(t, "/stream", "")
			require.EqualValues(t, 2, s.Chunks, "the head write's bytes past the cut are not a chunk")
			require.InDelta(t, 0.050, s.TTFT.Sum, 1e-9)
		})
	}
}

func TestCardinalityCaps(t *testing.T) {
	cfg := testConfig()
	cfg.MaxModels, cfg.MaxPaths = 1, 2
	h := newHarness(cfg)
	for i, c := range []struct{ path, model string }{
		{"/a", "m1"}, {"/b", "m2"}, {"/c", "m1"}, {"/a", "m3"},
	} {
		h.run(streamaggtest.Stream{Seq: uint32(i + 1), Request: "POST " + c.path + " HTTP/1.1\r\n\r\n{\"model\":\"" + c.model + "\"}",
			Head: sseHead, HeadBytes: uint32(len(sseHead)), HeadAt: 1, ChunkAt: []uint64{10}, ChunkBytes: 5})
	}
	for _, c := range []struct{ path, model string }{
		{"/a", "m1"}, {"/b", OtherValue}, {OtherValue, "m1"}, {"/a", OtherValue},
	} {
		require.EqualValues(t, 1, h.series(t, c.path, c.model).Chunks, "%s %s", c.path, c.model)
	}
}

func TestProcessFilter(t *testing.T) {
	cfg := testConfig()
	cfg.Pids = []uint32{424242}
	h := newHarness(cfg)
	h.run(streamaggtest.Stream{Seq: 1, Request: "GET / HTTP/1.1\r\n\r\n", Head: sseHead, HeadBytes: uint32(len(sseHead)),
		HeadAt: 1, ChunkAt: []uint64{10}, ChunkBytes: 5})
	h.run(streamaggtest.Stream{Seq: 2, PID: 424242, Request: "GET / HTTP/1.1\r\n\r\n", Head: sseHead,
		HeadBytes: uint32(len(sseHead)), HeadAt: 1, ChunkAt: []uint64{10, 20}, ChunkBytes: 5})
	require.EqualValues(t, 2, h.total(), "only the selected process's stream")
	require.Equal(t, 1, h.skips[SkipFiltered])

	exe, err := os.Executable()
	require.NoError(t, err)
	cfg = testConfig()
	cfg.ProcessNames = []string{filepath.Base(exe)}
	h = newHarness(cfg)
	h.run(streamaggtest.Stream{Request: "GET / HTTP/1.1\r\n\r\n", Head: sseHead, HeadBytes: uint32(len(sseHead)),
		HeadAt: 1, ChunkAt: []uint64{10}, ChunkBytes: 5})
	require.EqualValues(t, 1, h.total(), "selected by executable name")
}

func TestOpenStreamTableIsBounded(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpen = 10
	evicted := 0
	cfg.OnEvict = func() { evicted++ }
	a := mustNew(cfg)
	for i := range 25 {
		a.Add(&stream.Record{Kind: stream.KindRequest, ID: stream.ID{Sock: uint64(i), Seq: 1}, Data: []byte("GET / HTTP/1.1\r\n\r\n")})
	}
	require.Equal(t, 10, a.OpenCount())
	require.Equal(t, 15, evicted)
}

// A stream dropped for room is not counted again from its later records,
// and the entry dropped is the one seen least recently.
func TestEvictedStreamIsNotCountedTwice(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpen = 2
	evicted := 0
	cfg.OnEvict = func() { evicted++ }
	h := newHarness(cfg)
	streamOf := func(sock uint64, path string) []stream.Record {
		return streamaggtest.Stream{Sock: sock, Seq: 1, PID: h.pid, Request: "GET " + path + " HTTP/1.1\r\n\r\n", Head: sseHead,
			HeadBytes: uint32(len(sseHead)), HeadAt: 1, ChunkAt: []uint64{10, 20, 30}, ChunkBytes: 5}.Records(IntervalBounds)
	}
	a, b := streamOf(1, "/a"), streamOf(2, "/b")
	progress := func(end stream.Record) *stream.Record {
		end.Kind = stream.KindProgress
		return &end
	}
	// b is opened first; a is seen after it, so a third stream drops b.
	for _, r := range []*stream.Record{&b[0], &b[1], progress(b[2]), &a[0], &a[1]} {
		h.a.Add(r)
	}
	time.Sleep(time.Millisecond)
	h.a.Add(progress(a[2]))
	h.a.Add(&stream.Record{Kind: stream.KindRequest, ID: stream.ID{Sock: 3, Seq: 1}, Data: []byte("GET /c HTTP/1.1\r\n\r\n")})
	require.Equal(t, 1, evicted)
	require.Equal(t, 2, h.a.OpenCount())
	// b's end, with more chunks than its entry had counted, is not counted
	// again (nor in an opaque series of its own); a's ends as usual.
	bEnd := b[2]
	bEnd.Stats.Chunks, bEnd.Stats.Bytes = 5, 25
	h.a.Add(&bEnd)
	h.a.Add(&a[2])
	require.EqualValues(t, 3, h.series(t, "/b", "").Chunks)
	require.EqualValues(t, 3, h.series(t, "/a", "").Chunks)
	require.EqualValues(t, 6, h.total())
	require.EqualValues(t, 1, h.series(t, "/a", "").Duration.Count)
	require.Zero(t, h.series(t, "/b", "").Duration.Count, "b's end is not reported")
	require.Equal(t, 1, h.a.OpenCount(), "the third stream's alone")
}

// Past maxEnded dropped streams, the ones dropped last are still
// remembered: a late END of one of them is not counted as a stream of its
// own, and the memory of them stays bounded.
func TestDroppedStreamsRememberedPastTheBound(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpen = 1 // every new stream drops the one before
	h := newHarness(cfg)
	const n = maxEnded + 2
	for sock := uint64(1); sock <= n; sock++ {
		h.a.Add(&stream.Record{Kind: stream.KindRequest, ID: stream.ID{Sock: sock, Seq: 1}, PID: h.pid,
			Data: []byte("GET /x HTTP/1.1\r\n\r\n")})
	}
	require.Len(t, h.a.ended, maxEnded, "streams 2 to n-1 remembered, the first forgotten")
	// The END of a stream dropped just before the last one.
	end := stream.Record{Kind: stream.KindEnd, ID: stream.ID{Sock: n - 1, Seq: 1}, Reason: stream.EndTerminator,
		Stats: stream.Stats{RequestTS: 1, HeadersTS: 2, FirstChunkTS: 3, LastChunkTS: 9, EndTS: 9, Chunks: 5, Bytes: 50, PID: h.pid}}
	h.a.Add(&end)
	require.Zero(t, h.total(), "a dropped stream's END is counted")
	require.Empty(t, h.a.Snapshot())
	require.Len(t, h.a.ended, maxEnded-1, "its END ends its memory")
}

// Reused entries start clean: a stream after an evicted or ended one on
// the same entry keeps nothing of it.
func TestReusedStreamEntriesStartClean(t *testing.T) {
	cfg := testConfig()
	cfg.MaxOpen = 1
	h := newHarness(cfg)
	long := "POST /long/path/that/is/longer HTTP/1.1\r\n\r\n{\"model\":\"big-model\"}"
	h.a.Add(&stream.Record{Kind: stream.KindRequest, ID: stream.ID{Sock: 99, Seq: 1}, PID: 7, Data: []byte(long)})
	for seq := range uint32(2) {
		h.run(streamaggtest.Stream{Seq: seq + 1, Request: "GET /s HTTP/1.1\r\n\r\n", Head: sseHead,
			HeadBytes: uint32(len(sseHead)), HeadAt: 1, ChunkAt: []uint64{10}, ChunkBytes: 5})
	}
	snap := h.a.Snapshot()
	require.Len(t, snap, 1, "one series: GET /s, no model")
	require.EqualValues(t, 2, snap[0].Chunks)
}

// An idle stream ends from its last record's totals, once, and what the
// kernel writes about it later is not counted again.
func TestIdleStreamEndsOnce(t *testing.T) {
	h := newHarness(testConfig())
	recs := streamaggtest.Stream{Request: "GET /slow HTTP/1.1\r\n\r\n", Head: sseHead, HeadBytes: uint32(len(sseHead)),
		HeadAt: 1, ChunkAt: []uint64{10, 20}, ChunkBytes: 7}.Records(IntervalBounds)
	progress := recs[2]
	progress.Kind = stream.KindProgress
	for _, r := range []stream.Record{recs[0], recs[1], progress} {
		h.a.Add(&r)
	}
	require.Zero(t, h.a.ExpireIdle(time.Now().Add(-time.Hour)), "nothing is idle yet")
	require.Equal(t, 1, h.a.ExpireIdle(time.Now().Add(time.Second)))
	require.Zero(t, h.a.OpenCount())
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 1)
	require.Equal(t, stream.EndIdle, spans[0].EndReason)
	require.EqualValues(t, 2, spans[0].Chunks)
	require.Equal(t, streamaggtest.Client, spans[0].Client)
	// The kernel ends it later (a close): nothing more is counted.
	late := recs[2]
	late.Stats.Chunks, late.Stats.Bytes = 5, 35
	h.a.Add(&late)
	s := h.series(t, "/slow", "")
	require.EqualValues(t, 2, s.Chunks)
	require.EqualValues(t, 14, s.Bytes)
	require.EqualValues(t, 1, s.Duration.Count)
	require.Empty(t, h.a.TakeSpans(nil))
}

// steadyStreams are the streams of nsocks sockets, cycling through 8
// paths and 4 models, as records ready to be replayed with new sequence
// numbers: the steady state, where every series exists. Each is a vLLM
// chat stream as the kernel reports it: the request, the head, the first
// event's start, the usage chunk's end, the END.
func steadyStreams(nsocks int) [][]stream.Record {
	var out [][]stream.Record
	for i := range nsocks {
		out = append(out, streamaggtest.Stream{
			PID: uint32(os.Getpid()), Sock: uint64(i),
			Request: fmt.Sprintf("POST /v1/p%d/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"+
				"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"model\":\"m%d\",\"stream\":true}", i%8, i%4),
			Head: llmwire.UvicornHead, HeadBytes: uint32(len(llmwire.UvicornHead)), HeadAt: 1,
			ChunkAt: []uint64{10, 20, 30}, ChunkBytes: 10,
			FirstBody: first(llmwire.Chunked(llmwire.VLLMChatFirst)),
			Tails:     []string{tail(llmwire.Chunked(llmwire.VLLMChatUsage))},
		}.Records(IntervalBounds))
	}
	return out
}

// replay adds every stream's records once, under the next sequence
// number, all streams in flight at once: every first record, then every
// second one, and so on.
func replay(a *Aggregator, streams [][]stream.Record) {
	for _, recs := range streams {
		for i := range recs {
			recs[i].ID.Seq++
		}
	}
	most := 0
	for _, recs := range streams {
		most = max(most, len(recs))
	}
	for i := range most {
		for _, recs := range streams {
			if i < len(recs) {
				a.Add(&recs[i])
			}
		}
	}
}

// The metrics path must not allocate per record once its series exist:
// that is what lets one core take a million records a second.
func TestStreamRecordsDoNotAllocate(t *testing.T) {
	cfg := testConfig()
	cfg.Spans = false
	cfg.MaxPaths = 4 // half the paths go to _other
	h := newHarness(cfg)
	streams := steadyStreams(512)
	// Not streamed (skipped), opaque, and an END with no open stream: the
	// other ways a record goes.
	other := func(k uint64, s streamaggtest.Stream) []stream.Record {
		s.PID, s.Sock = 1, 1<<40+k // apart from the others
		return s.Records(IntervalBounds)
	}
	plain := other(0, streamaggtest.Stream{Request: "GET / HTTP/1.1\r\n\r\n", Head: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		HeadBytes: 40, HeadAt: 1, ChunkAt: []uint64{2}, ChunkBytes: 2})
	opaque := other(1, streamaggtest.Stream{Request: "\x16\x03\x01", Head: "\x17\x03\x03", HeadBytes: 5, HeadAt: 1,
		ChunkAt: []uint64{2, 3}, ChunkBytes: 2})
	orphan := other(2, streamaggtest.Stream{HeadAt: 1, ChunkAt: []uint64{2}, ChunkBytes: 2})[2:]
	streams = append(streams, plain, opaque, orphan)
	records := 0
	for _, recs := range streams {
		records += len(recs)
	}
	replay(h.a, streams) // first sight: series, interned strings
	allocs := testing.AllocsPerRun(100, func() { replay(h.a, streams) })
	require.Zero(t, allocs/float64(records), "allocations per record")
	require.Zero(t, h.a.OpenCount())
	require.Positive(t, h.skips[SkipNotStreamed])
	require.EqualValues(t, 64*102*3, h.series(t, OtherValue, "m1").Chunks, "p5 is capped, and its 64 sockets use m1")
	s := h.series(t, "/v1/p0/chat/completions", "m0")
	require.EqualValues(t, 64*102*3, s.Chunks)
	require.EqualValues(t, 64*102, s.OutputTokens.Count, "every stream's usage chunk was read")
	require.EqualValues(t, 64*102*28, s.OutputTokens.Sum)
	require.EqualValues(t, 64*102, s.TPOT.Count)
}

// BenchmarkStreamRecords measures the user-space cost of stream records
// once their series exist: request, response, first body, usage tail and
// end per stream (vLLM's chat stream), over 64 sockets, 8 paths and 4
// models. ns/record and allocs/record are per
// record; the standard columns are per stream. With spans, the span
// records are taken every 1024 streams, as the receiver's span flush does.
func BenchmarkStreamRecords(b *testing.B) {
	for _, spans := range []bool{false, true} {
		name := "metrics"
		if spans {
			name = "spans"
		}
		b.Run(name, func(b *testing.B) {
			cfg := testConfig()
			cfg.Spans = spans
			a := mustNew(cfg)
			streams := steadyStreams(64)
			replay(a, streams)
			a.TakeSpans(nil)
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			n := 0
			var spare []Span
			for b.Loop() {
				recs := streams[n%len(streams)]
				for i := range recs {
					recs[i].ID.Seq++
					a.Add(&recs[i])
				}
				if n++; n%1024 == 0 {
					// As the receiver does: the previous buffer goes back.
					spare = a.TakeSpans(spare)
				}
			}
			runtime.ReadMemStats(&m1)
			records := float64(len(streams[0]) * n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/records, "ns/record")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/records, "allocs/record")
		})
	}
}

func TestSpansBeyondMaxSpansAreDroppedUntilTaken(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSpans = 2
	dropped := 0
	cfg.OnSpanDrop = func() { dropped++ }
	h := newHarness(cfg)
	run := func(seq uint32) {
		h.run(streamaggtest.Stream{Request: fmt.Sprintf("POST /s%d HTTP/1.1\r\n\r\n{\"model\":\"m\"}", seq),
			Head: sseHead, HeadBytes: uint32(len(sseHead)), HeadAt: 1, ChunkAt: []uint64{10, 20}, ChunkBytes: 7, Seq: seq})
	}
	for seq := range uint32(3) {
		run(seq + 1)
	}
	require.Equal(t, 1, dropped)
	require.EqualValues(t, 1, h.series(t, "/s3", "m").Duration.Count, "a dropped span's stream is still in the metrics")
	first := h.a.TakeSpans(nil)
	require.Len(t, first, 2)
	require.Equal(t, "/s1", first[0].Path)
	require.Equal(t, "/s2", first[1].Path)

	// A buffer handed back gathers the spans after the call, cleared of
	// the spans it held.
	second := h.a.TakeSpans(first)
	require.Empty(t, second)
	require.Equal(t, Span{}, first[:2][1], "what the spare held is cleared")
	run(4)
	third := h.a.TakeSpans(second)
	require.Len(t, third, 1)
	require.Equal(t, "/s4", third[0].Path)
	require.Same(t, &first[:1][0], &third[0], "the spare buffer gathered the next spans")
	require.Equal(t, 1, dropped)
}

// A span buffer past spanGrowthJump grows once, to MaxSpans, not by
// doubling; below it, it stays small.
func TestSpanBufferGrowsToMaxSpansInOneStep(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSpans = 3000
	h := newHarness(cfg)
	seq := uint32(0)
	for len(h.a.spans) < spanGrowthJump || len(h.a.spans) < cap(h.a.spans) {
		seq++
		h.run(simple(seq, "/v1/chat/completions", "m"))
		require.Less(t, cap(h.a.spans), 2*spanGrowthJump, "below the jump a buffer doubles")
	}
	seq++
	h.run(simple(seq, "/v1/chat/completions", "m"))
	require.Equal(t, 3000, cap(h.a.spans), "a full buffer past the jump grows to MaxSpans")
	require.Len(t, h.a.TakeSpans(nil), int(seq))
}

// A stream stuck before its first chunk has no PROGRESS to carry its
// socket's addresses: the idle timeout ends it on the server port its
// payload records carried, a server's own or, on a client's stream whose
// request record was shed, its peer's.
func TestIdleStreamBeforeItsFirstChunkKeepsItsPort(t *testing.T) {
	h := newHarness(testConfig())
	h.a.Add(&stream.Record{Kind: stream.KindRequest, ID: stream.ID{Sock: 1, Seq: 1}, TS: 1, PID: 7, Port: 8000,
		Data: []byte("POST /v1/chat/completions HTTP/1.1\r\n\r\n")})
	h.a.Add(&stream.Record{Kind: stream.KindResponse, ID: stream.ID{Sock: 1, Seq: 1}, TS: 2, PID: 7, Port: 8000,
		Data: []byte(sseHead)})
	h.a.Add(&stream.Record{Kind: stream.KindResponse, ID: stream.ID{Sock: 2, Seq: 1}, TS: 2, PID: 8, Port: 443,
		Client: true, Data: []byte(sseHead)})
	require.Equal(t, 2, h.a.ExpireIdle(time.Now().Add(time.Second)))
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 2)
	slices.SortFunc(spans, func(a, b Span) int { return cmp.Compare(a.Port, b.Port) })
	require.True(t, spans[0].ClientCall, "a client's stream by its head record alone")
	require.EqualValues(t, 443, spans[0].Port)
	require.Equal(t, stream.EndIdle, spans[1].EndReason)
	require.False(t, spans[1].ClientCall)
	require.EqualValues(t, 8000, spans[1].Port)
}
