package tokenwirereceiver

import (
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pmetrictest"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/tokenwire/tokenwire/internal/handshake"
	"github.com/tokenwire/tokenwire/internal/handshakeagg"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/streamagg"
	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite the golden files in testdata/ from this run")

// goldenPID is a pid no process has (above pid_max's limit), so resources
// carry no executable or container looked up on this machine.
const goldenPID = 1 << 23

// translator is a receiver with its aggregators and nothing loaded: the
// kernel-free half, from records to OTLP.
func translator(t *testing.T) *tokenwireReceiver {
	t.Helper()
	cfg := createDefaultConfig()
	r := newReceiver(receivertest.NewNopSettings(metadata.Type), cfg, func() {})
	r.wallOffset = func() int64 { return 0 } // span times as the kernel's
	r.startTime = pcommon.Timestamp(1e9)
	r.mb = metadata.NewMetricsBuilder(cfg.MetricsBuilderConfig, r.set, metadata.WithStartTime(r.startTime))
	rb := r.mb.NewResourceBuilder()
	r.hostName = "test-host"
	rb.SetHostName(r.hostName)
	r.resource = rb.Emit()
	r.hsAgg = handshakeagg.New()
	agg, err := streamagg.New(streamagg.Config{MaxOpen: 64, MaxPaths: 100, MaxModels: 100, MaxSeries: 100, Spans: true},
		procinfo.NewCache(16))
	require.NoError(t, err)
	r.stAgg = agg
	return r
}

// TestTranslationGolden feeds the aggregators streams and handshakes of
// known shape and compares the metrics and spans with testdata/'s golden
// files (go test -run TestTranslationGolden -update-golden rewrites them).
func TestTranslationGolden(t *testing.T) {
	r := translator(t)
	// vLLM's chat stream, its head written with the first event; the
	// kernel sends the usage chunk's end as a tail.
	first := llmwire.Chunked(llmwire.VLLMChatFirst)
	usage := llmwire.Chunked(llmwire.VLLMChatUsage)
	traceparent := "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
	chat := `{"messages":[{"role":"user","content":"hi"}],"model":"` + llmwire.VLLMChatModel + `","stream":true}`
	// Ollama's /api/generate: the head with the first line, then the
	// final line (its first body write) whose end holds the usage.
	ollamaFinal := llmwire.Chunked(llmwire.OllamaGenFinal)
	ollamaHead := llmwire.OllamaHead + llmwire.Chunked(llmwire.OllamaGenFirst)
	tgiRequest := "POST /generate_stream HTTP/1.1\r\n\r\n{\"inputs\":\"hi\",\"parameters\":{\"details\":true}}"
	for _, s := range []streamaggtest.Stream{
		{Seq: 1, Request: "POST /v1/chat/completions HTTP/1.1\r\n" + traceparent + "\r\n" + chat,
			Head: llmwire.UvicornHead + first, HeadBytes: uint32(len(llmwire.UvicornHead) + len(first)), HeadAt: 80,
			ChunkAt: []uint64{100, 120, 140}, ChunkBytes: 30, Tails: []string{streamaggtest.TailOf(usage)}},
		{Seq: 2, Request: "POST /api/generate HTTP/1.1\r\n\r\n{\"model\":\"llama3.2\",\"prompt\":\"why\"}",
			Head: ollamaHead, HeadBytes: uint32(len(ollamaHead)), HeadAt: 2, ChunkAt: []uint64{300, 302, 330, 900}, ChunkBytes: 12,
			FirstBody: streamaggtest.FirstOf(ollamaFinal), Tails: []string{streamaggtest.TailOf(ollamaFinal)}},
		{Seq: 4, Request: "POST /v1/threads/4242/runs HTTP/1.1\r\n\r\n{\"model\":\"qwen\"}", Head: streamaggtest.SSEHead,
			HeadBytes: uint32(len(streamaggtest.SSEHead)), HeadAt: 3, ChunkAt: []uint64{50, 60}, ChunkBytes: 9,
			FirstBody: "13\r\nevent: thread.run\n\n\r\n"},
		{Seq: 3, Request: "\x16\x03\x01\x02\x00", Head: "\x17\x03\x03\x00\x20", HeadBytes: 25, HeadAt: 5,
			ChunkAt: []uint64{5, 40}, ChunkBytes: 25},
		{Seq: 5, Request: tgiRequest, Head: llmwire.TGIHead, HeadBytes: uint32(len(llmwire.TGIHead)), HeadAt: 1,
			ChunkAt: []uint64{20, 40}, ChunkBytes: 100, FirstBody: llmwire.Chunked(llmwire.TGIFirst),
			Tails: []string{llmwire.Chunked(llmwire.TGIError)}},
	} {
		s.PID = goldenPID
		recs := s.Records(streamagg.IntervalBounds)
		for i := range recs {
			r.stAgg.Add(&recs[i])
		}
	}
	local, remote := netip.MustParseAddrPort("192.0.2.1:40000"), netip.MustParseAddrPort("198.51.100.7:8000")
	for _, ev := range []handshake.Event{
		{Role: handshake.RoleClient, Duration: 300 * time.Microsecond, HasDuration: true, Local: local, Remote: remote},
		{Role: handshake.RoleClient, Duration: 1015 * time.Millisecond, HasDuration: true, Local: local, Remote: remote},
		{Role: handshake.RoleServer, Duration: 40 * time.Microsecond, HasDuration: true, Local: remote, Remote: local},
		{Role: handshake.RoleClient, Failed: true, Errno: syscall.ECONNREFUSED, Local: local, Remote: remote},
	} {
		r.hsAgg.Add(&ev)
	}

	md := r.metricsNow(pcommon.Timestamp(2e9))
	td := r.traceData(r.stAgg.TakeSpans(nil))
	metricsFile, tracesFile := filepath.Join("testdata", "expected_metrics.yaml"), filepath.Join("testdata", "expected_traces.yaml")
	if *updateGolden {
		require.NoError(t, golden.WriteMetrics(t, metricsFile, md))
		require.NoError(t, golden.WriteTraces(t, tracesFile, td))
	}
	wantMetrics, err := golden.ReadMetrics(metricsFile)
	require.NoError(t, err)
	require.NoError(t, pmetrictest.CompareMetrics(wantMetrics, md,
		pmetrictest.IgnoreTimestamp(), pmetrictest.IgnoreStartTimestamp(), pmetrictest.IgnoreResourceMetricsOrder(),
		pmetrictest.IgnoreMetricsOrder(), pmetrictest.IgnoreMetricDataPointsOrder()))
	wantTraces, err := golden.ReadTraces(tracesFile)
	require.NoError(t, err)
	require.NoError(t, ptracetest.CompareTraces(wantTraces, td,
		ptracetest.IgnoreSpanID(), ptracetest.IgnoreTraceID(), ptracetest.IgnoreResourceSpansOrder(), ptracetest.IgnoreSpansOrder()))
}

// BenchmarkEmission measures one collection's translation into pdata: 32
// stream series of one process (8 paths x 4 models) with their three
// histograms, the handshake series, and 1024 span records, as the
// receiver builds them at each interval and span flush.
func BenchmarkEmission(b *testing.B) {
	r := translator(&testing.T{})
	for i := range 1024 {
		recs := streamaggtest.Stream{PID: goldenPID, Sock: uint64(i % 64), Seq: uint32(i/64 + 1),
			Request: fmt.Sprintf("POST /v1/p%d/chat/completions HTTP/1.1\r\n\r\n{\"model\":\"m%d\"}", i%8, i%4),
			Head:    streamaggtest.SSEHead, HeadBytes: uint32(len(streamaggtest.SSEHead)), HeadAt: 1,
			ChunkAt: []uint64{10, 20, 30}, ChunkBytes: 10}.Records(streamagg.IntervalBounds)
		for j := range recs {
			r.stAgg.Add(&recs[j])
		}
	}
	spans := r.stAgg.TakeSpans(nil)
	b.ReportAllocs()
	for b.Loop() {
		_ = r.metricsNow(pcommon.Timestamp(2e9))
		_ = r.traceData(spans)
	}
}

// With streams.traceparent set to link (or ignore), a caller's
// traceparent does not choose the span's trace.
func TestUntrustedTraceParent(t *testing.T) {
	for mode, links := range map[string]int{TraceParentLink: 1, TraceParentIgnore: 0, TraceParentParent: 0} {
		r := translator(t)
		r.cfg.Streams.TraceParent = mode
		s := streamaggtest.Stream{PID: goldenPID, Request: "GET /x HTTP/1.1\r\n" +
			"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n",
			Head: streamaggtest.SSEHead, HeadBytes: uint32(len(streamaggtest.SSEHead)), HeadAt: 1, ChunkAt: []uint64{5}, ChunkBytes: 3}
		recs := s.Records(streamagg.IntervalBounds)
		for i := range recs {
			r.stAgg.Add(&recs[i])
		}
		sp := r.traceData(r.stAgg.TakeSpans(nil)).ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
		joined := sp.TraceID().String() == "0af7651916cd43dd8448eb211c80319c"
		require.Equal(t, mode == TraceParentParent, joined, mode)
		require.Equal(t, mode == TraceParentParent, !sp.ParentSpanID().IsEmpty(), mode)
		require.Equal(t, links, sp.Links().Len(), mode)
		if links > 0 {
			require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sp.Links().At(0).TraceID().String())
			require.Equal(t, "b7ad6b7169203331", sp.Links().At(0).SpanID().String())
		}
	}
}

// With streams.client_address off, spans carry no peer address.
func TestSpansWithoutClientAddress(t *testing.T) {
	for _, on := range []bool{true, false} {
		r := translator(t)
		r.cfg.Streams.ClientAddress = on
		s := streamaggtest.Stream{PID: goldenPID, Request: "GET /x HTTP/1.1\r\n\r\n",
			Head: streamaggtest.SSEHead, HeadBytes: uint32(len(streamaggtest.SSEHead)), HeadAt: 1, ChunkAt: []uint64{5}, ChunkBytes: 3}
		recs := s.Records(streamagg.IntervalBounds)
		for i := range recs {
			r.stAgg.Add(&recs[i])
		}
		a := r.traceData(r.stAgg.TakeSpans(nil)).ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes()
		for _, key := range []string{"client.address", "client.port"} {
			_, ok := a.Get(key)
			require.Equal(t, on, ok, "%s with client_address %v", key, on)
		}
		require.EqualValues(t, streamaggtest.Server.Port(), a.AsRaw()["server.port"])
	}
}

// Span times follow the wall clock as it is when the spans are sent: a
// stream that ends after the clock stepped (NTP's first sync after boot)
// is stamped on the new clock, not on the one the receiver started with.
func TestSpansFollowAWallClockStep(t *testing.T) {
	r := translator(t)
	var offset int64
	r.wallOffset = func() int64 { return offset }
	startOf := func() int64 {
		s := streamaggtest.Stream{PID: goldenPID, Request: "GET /x HTTP/1.1\r\n\r\n",
			Head: streamaggtest.SSEHead, HeadBytes: uint32(len(streamaggtest.SSEHead)), HeadAt: 1, ChunkAt: []uint64{5}, ChunkBytes: 3}
		recs := s.Records(streamagg.IntervalBounds)
		for i := range recs {
			r.stAgg.Add(&recs[i])
		}
		sp := r.traceData(r.stAgg.TakeSpans(nil)).ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
		return int64(sp.StartTimestamp())
	}
	before := startOf()
	offset = int64(time.Hour)
	if after := startOf(); after-before != int64(time.Hour) {
		t.Fatalf("after a one-hour step the same stream starts %v later, want 1h", time.Duration(after-before))
	}
}
