package tokenwirereceiver

import (
	"context"
	"errors"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/goleak"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// started is a receiver running in both pipelines, as a collector runs it.
type started struct {
	metrics *consumertest.MetricsSink
	traces  *consumertest.TracesSink
	// The two handles, for tests that shut them down one at a time.
	metricsRecv, tracesRecv component.Component
	shutdown                func() // both handles, once; also at cleanup
}

func start(t *testing.T, cfg *Config) *started {
	t.Helper()
	if slices.Equal(cfg.HookPreference, createDefaultConfig().HookPreference) {
		cfg.HookPreference = bpftest.HookPreference() // the kernel matrix forces a hook type
	}
	f := NewFactory()
	set := receivertest.NewNopSettings(metadata.Type)
	s := &started{metrics: new(consumertest.MetricsSink), traces: new(consumertest.TracesSink)}
	mr, err := f.CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	tr, err := f.CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	s.metricsRecv, s.tracesRecv = mr, tr
	require.NoError(t, mr.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	done := false
	s.shutdown = func() {
		if done {
			return
		}
		done = true
		require.NoError(t, mr.Shutdown(context.Background()))
		require.NoError(t, tr.Shutdown(context.Background()))
	}
	t.Cleanup(s.shutdown)
	return s
}

// point finds the data point of a metric whose attributes include want in
// the most recent emission. Sums and histograms are cumulative, so the last
// emission holds the totals.
func lastEmission(sink *consumertest.MetricsSink) pmetric.Metrics {
	all := sink.AllMetrics()
	if len(all) == 0 {
		return pmetric.NewMetrics()
	}
	return all[len(all)-1]
}

func matches(attrs pcommon.Map, want map[string]any) bool {
	for k, v := range want {
		got, ok := attrs.Get(k)
		if !ok || got.AsRaw() != v {
			return false
		}
	}
	return true
}

func histogramCount(md pmetric.Metrics, name string, want map[string]any) (count uint64, points int) {
	forEachMetric(md, name, func(m pmetric.Metric) {
		dps := m.Histogram().DataPoints()
		for i := range dps.Len() {
			if matches(dps.At(i).Attributes(), want) {
				count += dps.At(i).Count()
				points++
			}
		}
	})
	return count, points
}

func sumValue(md pmetric.Metrics, name string, want map[string]any) (value int64, points int) {
	forEachMetric(md, name, func(m pmetric.Metric) {
		dps := m.Sum().DataPoints()
		for i := range dps.Len() {
			if matches(dps.At(i).Attributes(), want) {
				value += dps.At(i).IntValue()
				points++
			}
		}
	})
	return value, points
}

func forEachMetric(md pmetric.Metrics, name string, fn func(pmetric.Metric)) {
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				if ms.At(k).Name() == name {
					fn(ms.At(k))
				}
			}
		}
	}
}

func TestHandshakeMetricsAreExact(t *testing.T) {
	bpftest.Require(t)
	ln, port := teststack.AcceptAndClose(t)
	closed, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	cfg := createDefaultConfig()
	cfg.CollectionInterval = 100 * time.Millisecond
	cfg.Handshake.Ports = []int{port, closedPort}
	s := start(t, cfg)

	const n = 25
	for range n {
		c, err := net.Dial("tcp4", ln.Addr().String())
		require.NoError(t, err)
		c.Close()
	}
	_, err = net.Dial("tcp4", closed.Addr().String())
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "dial to a closed port: %v", err)

	client := map[string]any{"network.tcp.handshake.role": "client", "server.port": int64(port), "network.type": "ipv4"}
	server := map[string]any{"network.tcp.handshake.role": "server", "server.port": int64(port), "network.type": "ipv4"}
	refused := map[string]any{"network.tcp.handshake.role": "client", "server.port": int64(closedPort), "error.type": "refused", "network.type": "ipv4"}
	require.Eventually(t, func() bool {
		md := lastEmission(s.metrics)
		c, _ := histogramCount(md, "tokenwire.tcp.handshake.duration", client)
		sv, _ := histogramCount(md, "tokenwire.tcp.handshake.duration", server)
		f, _ := sumValue(md, "tokenwire.tcp.handshake.failures", refused)
		return c >= n && sv >= n && f >= 1
	}, 5*time.Second, 20*time.Millisecond)

	s.shutdown() // final flush: the totals cannot move after this
	md := lastEmission(s.metrics)
	for _, tc := range []struct {
		attrs map[string]any
	}{{client}, {server}} {
		count, points := histogramCount(md, "tokenwire.tcp.handshake.duration", tc.attrs)
		require.Equal(t, 1, points, "one series for %v", tc.attrs)
		require.EqualValues(t, n, count, "handshakes recorded for %v", tc.attrs)
	}
	v, points := sumValue(md, "tokenwire.tcp.handshake.failures", refused)
	require.Equal(t, 1, points)
	require.EqualValues(t, 1, v)
	// Nothing else failed on the watched ports.
	total, _ := sumValue(md, "tokenwire.tcp.handshake.failures", map[string]any{})
	require.EqualValues(t, 1, total)

	// Units, temporality and resource as documented.
	forEachMetric(md, "tokenwire.tcp.handshake.duration", func(m pmetric.Metric) {
		require.Equal(t, "s", m.Unit())
		require.Equal(t, pmetric.AggregationTemporalityCumulative, m.Histogram().AggregationTemporality())
		dp := m.Histogram().DataPoints().At(0)
		require.Greater(t, dp.Min(), 0.0)
		require.Less(t, dp.Max(), 1.0)
	})
	host, ok := md.ResourceMetrics().At(0).Resource().Attributes().Get("host.name")
	require.True(t, ok)
	require.NotEmpty(t, host.Str())
}

// TestStartShutdownLeavesNothing starts and stops the receiver 20 times in
// one process: afterwards no program or map of ours is loaded and no
// goroutine is left behind. While running, the two pipelines share one
// loaded program.
func TestStartShutdownLeavesNothing(t *testing.T) {
	bpftest.Require(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base := newBaseline(t)
	for i := range 20 {
		cfg := createDefaultConfig()
		cfg.CollectionInterval = 10 * time.Millisecond
		s := start(t, cfg)
		if i == 0 {
			during, err := base.Ours()
			require.NoError(t, err)
			// One program per hook point (handshake: 1, streams: 4 as
			// tp_btf here), each once although two pipelines started the
			// receiver.
			require.Len(t, during.Programs, 5, "metrics and traces pipelines must share one set of programs: %v", during)
			require.Len(t, slices.Compact(slices.Clone(during.Programs)), 5, "a program loaded twice: %v", during)
		}
		s.shutdown()
	}
	requireNothingLoaded(t, base, "20 Start/Shutdown cycles")
}

// TestFailedStartLeavesNothing makes Start fail at attach time (kprobes do
// not exist on this kernel; on one where they do, fentry-only is the
// failing case) and checks that the error says why and nothing stays.
func TestFailedStartLeavesNothing(t *testing.T) {
	bpftest.Require(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base := newBaseline(t)

	cfg := createDefaultConfig()
	cfg.HookPreference = []string{"kprobe"}
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, new(consumertest.MetricsSink))
	require.NoError(t, err)
	err = r.Start(context.Background(), componenttest.NewNopHost())
	if err == nil {
		require.NoError(t, r.Shutdown(context.Background()))
		t.Skip("kprobes work on this kernel: no failing hook type to test with")
	}
	require.Contains(t, err.Error(), "kprobe:")
	require.NoError(t, r.Shutdown(context.Background()))
	requireNothingLoaded(t, base, "a failed Start")
}
