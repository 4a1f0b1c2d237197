package tokenwirereceiver

import (
	"net/netip"
	"os"
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
	id := stream.ID{Sock: 0xffff8880_00001000, Seq: seq}
	pid := sy.pid
	if pid == 0 {
		pid = uint32(os.Getpid())
	}
	sy.s.add(&stream.Record{Kind: stream.KindRequest, ID: id, PID: pid, Data: []byte(req)})
	sy.s.add(&stream.Record{Kind: stream.KindResponse, ID: id, PID: pid, Flags: stream.RespHTTP, Data: []byte(head)})
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
	sy.s.add(&stream.Record{Kind: stream.KindEnd, ID: id, Reason: stream.EndTerminator, Stats: st})
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

// BenchmarkStreamRecords measures the user-space cost of one stream's
// records (request, response, progress, end) once the series exists.
func BenchmarkStreamRecords(b *testing.B) {
	sy := newSynthetic(&createDefaultConfig().Streams)
	sy.s.cfg.Spans = false
	req, head := "POST /v1/chat/completions HTTP/1.1\r\n\r\n{\"model\":\"m\"}", sseHead
	b.ReportAllocs()
	seq := uint32(0)
	for b.Loop() {
		seq++
		sy.run(seq, req, head, uint32(len(head)), 1, []uint64{10, 20, 30}, 10)
	}
}
