package tokenwirereceiver

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// synthetic feeds streamStats the records of one stream, as the kernel
// would write them, without a kernel: the user-space half on its own.
type synthetic struct {
	s     *streamStats
	id    stream.ID
	pid   uint32
	skips map[string]int
}

func newSynthetic(cfg *StreamsConfig) *synthetic {
	sy := &synthetic{skips: map[string]int{}}
	sy.s = newStreamStats(cfg, 0, func(r string) { sy.skips[r]++ }, func() {})
	return sy
}

const ms = uint64(time.Millisecond)

// run plays a stream: request at t=0, head write at headAt, chunks at the
// given times (ms), end at the last chunk + 1 ms.
func (sy *synthetic) run(seq uint32, req, head string, headBytes uint32, headAt uint64, chunkAt []uint64, chunkBytes uint64) {
	pid := sy.pid
	if pid == 0 {
		pid = uint32(os.Getpid())
	}
	recs := streamRecords(pid, req, head, headBytes, headAt, chunkAt, chunkBytes)
	for i := range recs {
		recs[i].ID.Seq = seq
		sy.s.add(&recs[i])
	}
}

// streamRecords returns the request, response and end records of one
// stream (see run), on one socket with Seq 0.
func streamRecords(pid uint32, req, head string, headBytes uint32, headAt uint64, chunkAt []uint64, chunkBytes uint64) []stream.Record {
	id := stream.ID{Sock: 0xffff8880_00001000}
	st := stream.Stats{
		RequestTS: 1000 * ms, HeadersTS: 1000*ms + headAt*ms, HeadBytes: headBytes, PID: pid,
		Local:  netip.MustParseAddrPort("192.0.2.1:8000"),
		Remote: netip.MustParseAddrPort("198.51.100.7:40000"),
	}
	for i, at := range chunkAt {
		ts := 1000*ms + at*ms
		if i == 0 {
			st.FirstChunkTS = ts
		} else {
			gap := ts - st.LastChunkTS
			st.GapSum += gap
			st.GapMax = max(st.GapMax, gap)
			b := 0
			for b < len(chunkIntervalDef.bounds) && float64(gap)/1e9 > chunkIntervalDef.bounds[b] {
				b++
			}
			st.GapCounts[b]++
		}
		st.LastChunkTS = ts
		st.Chunks++
		st.Bytes += chunkBytes
	}
	st.EndTS = st.LastChunkTS + ms
	return []stream.Record{
		{Kind: stream.KindRequest, ID: id, PID: pid, Data: []byte(req)},
		{Kind: stream.KindResponse, ID: id, PID: pid, Flags: stream.RespHTTP, Data: []byte(head)},
		{Kind: stream.KindEnd, ID: id, Reason: stream.EndTerminator, Stats: st},
	}
}

func (sy *synthetic) metrics(t *testing.T) pmetric.Metrics {
	mb := metadata.NewMetricsBuilder(metadata.DefaultMetricsBuilderConfig(), receivertest.NewNopSettings(metadata.Type))
	hist := pmetric.NewMetrics()
	sy.s.record(mb, hist, "host", 0, pcommon.NewTimestampFromTime(time.Now()))
	md := mb.Emit()
	mergeResources(md, hist)
	return md
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

func TestHeadWithFirstEventIsTheFirstChunk(t *testing.T) {
	sy := newSynthetic(&createDefaultConfig().Streams)
	first := "17\r\ndata: {\"t\":\"hello\"}\n\n\r\n"
	// Headers and the first event in one write at 80 ms; the kernel then
	// sees chunks at 100, 120, 140 ms.
	sy.run(1, "POST /v1/chat/completions HTTP/1.1\r\n\r\n{\"model\":\"m\"}", sseHead+first,
		uint32(len(sseHead)+len(first)), 80, []uint64{100, 120, 140}, 30)
	md := sy.metrics(t)
	want := map[string]any{"url.path": "/v1/chat/completions", "gen_ai.request.model": "m"}
	chunks, _ := sumValue(md, "tokenwire.stream.chunks", want)
	require.EqualValues(t, 4, chunks)
	bytes, _ := sumValue(md, "tokenwire.stream.bytes", want)
	require.EqualValues(t, len(first)+3*30, bytes)
	intervals, _ := histogramCount(md, "tokenwire.stream.chunk.interval", want)
	require.EqualValues(t, 3, intervals, "80->100 from the head, then 100->120->140")
	forEachMetric(md, "gen_ai.server.time_to_first_token", func(m pmetric.Metric) {
		require.InDelta(t, 0.080, m.Histogram().DataPoints().At(0).Sum(), 1e-9, "TTFT is the head write")
	})
	td := sy.s.takeSpans()
	a := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().AsRaw()
	require.EqualValues(t, 4, a["tokenwire.stream.chunks"])
	require.InDelta(t, 0.080, a["gen_ai.response.time_to_first_chunk"], 1e-9)
	require.Equal(t, "198.51.100.7", a["client.address"])
}

func TestHeadersOnlyHeadIsNotAChunk(t *testing.T) {
	sy := newSynthetic(&createDefaultConfig().Streams)
	sy.run(1, "GET /stream HTTP/1.1\r\n\r\n", sseHead, uint32(len(sseHead)), 1, []uint64{50, 60}, 10)
	md := sy.metrics(t)
	chunks, _ := sumValue(md, "tokenwire.stream.chunks", map[string]any{})
	require.EqualValues(t, 2, chunks)
	forEachMetric(md, "gen_ai.server.time_to_first_token", func(m pmetric.Metric) {
		require.InDelta(t, 0.050, m.Histogram().DataPoints().At(0).Sum(), 1e-9)
	})
}

func TestCardinalityCaps(t *testing.T) {
	cfg := createDefaultConfig().Streams
	cfg.MaxModels, cfg.MaxPaths = 1, 2
	sy := newSynthetic(&cfg)
	for i, c := range []struct{ path, model string }{
		{"/a", "m1"}, {"/b", "m2"}, {"/c", "m1"}, {"/a", "m3"},
	} {
		sy.run(uint32(i+1), "POST "+c.path+" HTTP/1.1\r\n\r\n{\"model\":\""+c.model+"\"}", sseHead, uint32(len(sseHead)), 1, []uint64{10}, 5)
	}
	md := sy.metrics(t)
	for _, tc := range []struct {
		path, model string
		want        int64
	}{
		{"/a", "m1", 1}, {"/b", otherValue, 1}, {otherValue, "m1", 1}, {"/a", otherValue, 1},
	} {
		n, _ := sumValue(md, "tokenwire.stream.chunks", map[string]any{"url.path": tc.path, "gen_ai.request.model": tc.model})
		require.Equal(t, tc.want, n, "%s %s", tc.path, tc.model)
	}
}

func TestProcessFilter(t *testing.T) {
	cfg := createDefaultConfig().Streams
	cfg.Pids = []int{424242}
	sy := newSynthetic(&cfg)
	sy.run(1, "GET / HTTP/1.1\r\n\r\n", sseHead, uint32(len(sseHead)), 1, []uint64{10}, 5)
	sy.pid = 424242
	sy.run(2, "GET / HTTP/1.1\r\n\r\n", sseHead, uint32(len(sseHead)), 1, []uint64{10, 20}, 5)
	md := sy.metrics(t)
	n, _ := sumValue(md, "tokenwire.stream.chunks", map[string]any{})
	require.EqualValues(t, 2, n, "only the selected process's stream")
	require.Equal(t, 1, sy.skips[skipFiltered])

	byName := createDefaultConfig().Streams
	exe, err := os.Executable()
	require.NoError(t, err)
	byName.ProcessNames = []string{baseName(exe)}
	sy = newSynthetic(&byName)
	sy.run(1, "GET / HTTP/1.1\r\n\r\n", sseHead, uint32(len(sseHead)), 1, []uint64{10}, 5)
	n, _ = sumValue(sy.metrics(t), "tokenwire.stream.chunks", map[string]any{})
	require.EqualValues(t, 1, n, "selected by executable name")
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

func TestOpenStreamTableIsBounded(t *testing.T) {
	cfg := createDefaultConfig().Streams
	cfg.MaxSockets = 10
	evicted := 0
	s := newStreamStats(&cfg, 0, func(string) {}, func() { evicted++ })
	for i := range 25 {
		s.add(&stream.Record{Kind: stream.KindRequest, ID: stream.ID{Sock: uint64(i), Seq: 1}, Data: []byte("GET / HTTP/1.1\r\n\r\n")})
	}
	require.Equal(t, 10, s.openCount())
	require.Equal(t, 15, evicted)
}

// steadyStreams are the records of streams on nsocks sockets, cycling
// through 8 paths and 4 models, ready to be replayed with new sequence
// numbers: the receiver's steady state, where every series exists.
func steadyStreams(nsocks int) [][]stream.Record {
	var out [][]stream.Record
	for i := range nsocks {
		req := fmt.Sprintf("POST /v1/p%d/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n{\"model\":\"m%d\",\"stream\":true}", i%8, i%4)
		recs := streamRecords(uint32(os.Getpid()), req, sseHead, uint32(len(sseHead)), 1, []uint64{10, 20, 30}, 10)
		for j := range recs {
			recs[j].ID.Sock += uint64(i)
		}
		out = append(out, recs)
	}
	return out
}

// replay adds every stream's records once, under the next sequence
// number, all streams in flight at once: every first record, then every
// second one, and so on.
func replay(s *streamStats, streams [][]stream.Record) {
	for _, recs := range streams {
		for i := range recs {
			recs[i].ID.Seq++
		}
	}
	for i := range 3 {
		for _, recs := range streams {
			if i < len(recs) {
				s.add(&recs[i])
			}
		}
	}
}

// The metrics path must not allocate per record once its series exist:
// that is what lets one core take a million records a second.
func TestStreamRecordsDoNotAllocate(t *testing.T) {
	cfg := createDefaultConfig().Streams
	cfg.Spans = false
	cfg.MaxPaths = 4 // half the paths go to _other
	skips := 0
	s := newStreamStats(&cfg, 0, func(string) { skips++ }, func() {})
	streams := steadyStreams(512)
	// Not streamed (skipped), opaque, and an END with no open stream: the
	// other ways a record goes.
	plain := streamRecords(1, "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 40, 1, []uint64{2}, 2)
	opaque := streamRecords(1, "\x16\x03\x01", "\x17\x03\x03", 5, 1, []uint64{2, 3}, 2)
	orphan := streamRecords(1, "", "", 0, 1, []uint64{2}, 2)[2:]
	for k, recs := range [][]stream.Record{plain, opaque, orphan} {
		for i := range recs {
			recs[i].ID.Sock = 1<<40 + uint64(k) // apart from the others
		}
	}
	streams = append(streams, plain, opaque, orphan)
	records := 0
	for _, recs := range streams {
		records += len(recs)
	}
	replay(s, streams) // first sight: series, interned strings
	allocs := testing.AllocsPerRun(100, func() { replay(s, streams) })
	require.Zero(t, allocs/float64(records), "allocations per record")
	require.Zero(t, s.openCount())
	require.Positive(t, skips)

	md := newSyntheticMetrics(s)
	n, _ := sumValue(md, "tokenwire.stream.chunks", map[string]any{"url.path": otherValue, "gen_ai.request.model": "m1"})
	require.EqualValues(t, 64*102*3, n, "p5 is capped, and its 64 sockets use m1")
	n, _ = sumValue(md, "tokenwire.stream.chunks", map[string]any{"url.path": "/v1/p0/chat/completions", "gen_ai.request.model": "m0"})
	require.EqualValues(t, 64*102*3, n)
}

func newSyntheticMetrics(s *streamStats) pmetric.Metrics {
	return (&synthetic{s: s}).metrics(nil)
}

// Reused entries start clean: a stream after an evicted or ended one on
// the same entry keeps nothing of it.
func TestReusedStreamEntriesStartClean(t *testing.T) {
	cfg := createDefaultConfig().Streams
	cfg.MaxSockets = 1
	sy := newSynthetic(&cfg)
	long := "POST /long/path/that/is/longer HTTP/1.1\r\n\r\n{\"model\":\"big-model\"}"
	sy.s.add(&stream.Record{Kind: stream.KindRequest, ID: stream.ID{Sock: 99, Seq: 1}, PID: 7, Data: []byte(long)})
	sy.run(1, "GET /s HTTP/1.1\r\n\r\n", sseHead, uint32(len(sseHead)), 1, []uint64{10}, 5) // evicts sock 99
	sy.run(2, "GET /s HTTP/1.1\r\n\r\n", sseHead, uint32(len(sseHead)), 1, []uint64{10}, 5)
	md := sy.metrics(t)
	n, points := sumValue(md, "tokenwire.stream.chunks", map[string]any{})
	require.EqualValues(t, 2, n)
	require.Equal(t, 1, points, "one series: GET /s, no model")
}

// BenchmarkStreamRecords measures the user-space cost of stream records
// once their series exist: request, response and end per stream, over 64
// sockets, 8 paths and 4 models. ns/record and allocs/record are per
// record; the standard columns are per stream. With spans, the pending
// spans are taken every 1024 streams, as the receiver's span flush would.
func BenchmarkStreamRecords(b *testing.B) {
	for _, spans := range []bool{false, true} {
		name := "metrics"
		if spans {
			name = "spans"
		}
		b.Run(name, func(b *testing.B) {
			cfg := createDefaultConfig().Streams
			cfg.Spans = spans
			s := newStreamStats(&cfg, 0, func(string) {}, func() {})
			streams := steadyStreams(64)
			replay(s, streams)
			s.takeSpans()
			b.ReportAllocs()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			n := 0
			for b.Loop() {
				recs := streams[n%len(streams)]
				for i := range recs {
					recs[i].ID.Seq++
					s.add(&recs[i])
				}
				if n++; n%1024 == 0 {
					s.takeSpans()
				}
			}
			runtime.ReadMemStats(&m1)
			records := float64(3 * n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/records, "ns/record")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/records, "allocs/record")
		})
	}
}
