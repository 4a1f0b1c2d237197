package tokenwirereceiver

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// TestSelfTelemetry runs one stream (and its handshake) through a receiver
// whose collector telemetry is read back: records read, none lost, the
// programs attached per hook point, the open-stream and map gauges.
func TestSelfTelemetry(t *testing.T) {
	bpftest.Require(t)
	srv := teststack.ServeHTTP(t, sseServer(5*time.Millisecond, 5*time.Millisecond, 3))
	port := srv.Port

	tel := componenttest.NewTelemetry()
	defer tel.Shutdown(context.Background())
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	cfg := createDefaultConfig()
	cfg.CollectionInterval = 100 * time.Millisecond
	cfg.Handshake.Ports = []int{port}
	cfg.Streams.Ports = []int{port}
	cfg.Streams.FlushInterval = 100 * time.Millisecond
	r, err := NewFactory().CreateMetrics(context.Background(), set, cfg, new(consumertest.MetricsSink))
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))
	defer func() { require.NoError(t, r.Shutdown(context.Background())) }()

	require.NoError(t, teststack.Fetch(nil, "GET", srv.URL+"/", ""))

	sumFor := func(name, capability string) int64 {
		m, err := tel.GetMetric(name)
		if err != nil {
			return -1
		}
		var total int64
		var points []metricdata.DataPoint[int64]
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			points = d.DataPoints
		case metricdata.Gauge[int64]:
			points = d.DataPoints
		}
		for _, dp := range points {
			if v, ok := dp.Attributes.Value(attribute.Key("capability")); capability == "" || (ok && v.AsString() == capability) {
				total += dp.Value
			}
		}
		return total
	}
	require.Eventually(t, func() bool {
		// request, response, first-chunk progress, end; client + server handshake
		return sumFor("otelcol_receiver_tokenwire_records_read", "stream") >= 4 &&
			sumFor("otelcol_receiver_tokenwire_records_read", "handshake") >= 2
	}, 5*time.Second, 50*time.Millisecond)
	require.EqualValues(t, 0, sumFor("otelcol_receiver_tokenwire_records_lost", ""))
	require.EqualValues(t, 1, sumFor("otelcol_receiver_tokenwire_programs_attached", "handshake"))
	// On this kernel every stream hook point attaches as tp_btf: four of
	// them; the fallback peek (tcp_sendmsg_locked) is not needed.
	require.EqualValues(t, 4, sumFor("otelcol_receiver_tokenwire_programs_attached", "stream"), "one per stream hook point")
	// Both enabled capabilities are up; XDP, not enabled, has no point.
	require.EqualValues(t, 1, sumFor("otelcol_receiver_tokenwire_capability_up", "stream"))
	require.EqualValues(t, 1, sumFor("otelcol_receiver_tokenwire_capability_up", "handshake"))
	up, err := tel.GetMetric("otelcol_receiver_tokenwire_capability_up")
	require.NoError(t, err)
	require.Len(t, up.Data.(metricdata.Gauge[int64]).DataPoints, 2)
	require.GreaterOrEqual(t, sumFor("otelcol_receiver_tokenwire_streams_open", ""), int64(0))
	require.GreaterOrEqual(t, sumFor("otelcol_receiver_tokenwire_map_entries", "stream"), int64(0))
	require.EqualValues(t, 0, sumFor("otelcol_receiver_tokenwire_payloads_unread", ""))
	// Reported on every kernel; 0 where the kernel's copy is not read.
	// Where it is, a write split across two pages with fewer than 16 bytes
	// in the second is read from the writer's memory: rare, not never.
	fromUser := sumFor("otelcol_receiver_tokenwire_write_tails_from_user", "")
	require.True(t, fromUser == 0 || fromUser == 1 && stream.RegsByCast(), "write_tails_from_user = %d", fromUser)
	// The handshake probe's count of client handshakes it could not
	// measure is reported (its value depends on what else connected).
	untracked, err := tel.GetMetric("otelcol_receiver_tokenwire_connections_untracked")
	require.NoError(t, err)
	want := attribute.NewSet(attribute.String("capability", "handshake"), attribute.String("reason", "start_not_seen"))
	require.True(t, slices.ContainsFunc(untracked.Data.(metricdata.Sum[int64]).DataPoints, func(dp metricdata.DataPoint[int64]) bool {
		return dp.Attributes.Equals(&want)
	}), "no handshake start_not_seen point")
}

// TestStalledTracesPipelineHoldsAtMostMaxPendingSpans stalls the traces
// pipeline in its first call: of the streams that end meanwhile, the
// receiver keeps streams.max_pending_spans spans, counts the rest as
// dropped, and sends what it kept once the pipeline moves again.
func TestStalledTracesPipelineHoldsAtMostMaxPendingSpans(t *testing.T) {
	bpftest.Require(t)
	srv := teststack.ServeHTTP(t, sseServer(time.Millisecond, time.Millisecond, 2))

	tel := componenttest.NewTelemetry()
	defer tel.Shutdown(context.Background())
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	cfg := streamConfig(srv.Port, 100*time.Millisecond)
	cfg.Streams.MaxPendingSpans = 2

	stalled, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	sent := 0
	next, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		mu.Lock()
		first := sent == 0
		sent += td.SpanCount()
		mu.Unlock()
		if first {
			close(stalled)
			<-release
		}
		return nil
	})
	require.NoError(t, err)
	r, err := NewFactory().CreateTraces(context.Background(), set, cfg, next)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))
	released := false
	defer func() {
		if !released {
			close(release)
		}
		require.NoError(t, r.Shutdown(context.Background()))
	}()
	sentSpans := func() int {
		mu.Lock()
		defer mu.Unlock()
		return sent
	}
	dropped := func() int64 {
		m, err := tel.GetMetric("otelcol_receiver_tokenwire_spans_dropped")
		if err != nil {
			return 0
		}
		var n int64
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			n += dp.Value
		}
		return n
	}

	require.NoError(t, teststack.Fetch(nil, "GET", srv.URL+"/", ""))
	select {
	case <-stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the first span was not sent within 5s")
	}
	require.NoError(t, teststack.FetchAll(nil, 5, "GET", srv.URL+"/", ""))
	require.Eventually(t, func() bool { return dropped() >= 3 }, 5*time.Second, 20*time.Millisecond,
		"5 streams ended while the pipeline stalled, 2 spans pending at most")
	close(release)
	released = true
	require.Eventually(t, func() bool { return sentSpans() >= 3 }, 5*time.Second, 20*time.Millisecond)
	require.NoError(t, r.Shutdown(context.Background()))
	require.Equal(t, 3, sentSpans(), "the first span and the two kept")
	require.EqualValues(t, 3, dropped())
}
