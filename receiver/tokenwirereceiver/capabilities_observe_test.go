package tokenwirereceiver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// observed is a receiver (metrics pipeline only) whose self-telemetry and
// logs the test reads back.
type observed struct {
	tel      *componenttest.Telemetry
	logs     *observer.ObservedLogs
	metrics  *consumertest.MetricsSink
	recv     component.Component
	startErr error
	stopped  bool
}

// startObserved creates the receiver, lets seam adjust it, and starts it,
// inside ns when ns is not nil (XDP looks its interfaces up there). The
// error of Start is in startErr. Tests that check for leaks must call
// shutdown themselves: cleanups run after their deferred checks.
func startObserved(t *testing.T, cfg *Config, ns *bpftest.Netns, seam func(*tokenwireReceiver)) *observed {
	t.Helper()
	o := &observed{tel: componenttest.NewTelemetry(), metrics: new(consumertest.MetricsSink)}
	t.Cleanup(func() { require.NoError(t, o.tel.Shutdown(context.Background())) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = o.tel.NewTelemetrySettings()
	core, logs := observer.New(zapcore.InfoLevel)
	// Stack traces on error lines, as the collector's logger has them.
	set.Logger = zap.New(core, zap.AddStacktrace(zapcore.ErrorLevel))
	o.logs = logs
	recv, err := NewFactory().CreateMetrics(context.Background(), set, cfg, o.metrics)
	require.NoError(t, err)
	if seam != nil {
		seam(recv.(*handle).r)
	}
	o.recv = recv
	start := func() { o.startErr = recv.Start(context.Background(), componenttest.NewNopHost()) }
	if ns != nil {
		ns.Do(t, start)
	} else {
		start()
	}
	t.Cleanup(func() { o.shutdown(t) })
	return o
}

func (o *observed) shutdown(t *testing.T) {
	if !o.stopped {
		o.stopped = true
		require.NoError(t, o.recv.Shutdown(context.Background()))
	}
}

// upPoint is one point of otelcol_receiver_tokenwire_capability_up.
type upPoint struct {
	up        int64
	errorType string // "" when the point has no error.type
}

// capabilityUp reads otelcol_receiver_tokenwire_capability_up through the
// collector's telemetry reader, by capability.
func (o *observed) capabilityUp(t *testing.T) map[string]upPoint {
	t.Helper()
	m, err := o.tel.GetMetric("otelcol_receiver_tokenwire_capability_up")
	require.NoError(t, err)
	g, ok := m.Data.(metricdata.Gauge[int64])
	require.True(t, ok, "capability_up is a %T", m.Data)
	out := map[string]upPoint{}
	for _, dp := range g.DataPoints {
		c, ok := dp.Attributes.Value(attribute.Key("capability"))
		require.True(t, ok, "a capability_up point without capability: %v", dp.Attributes)
		et, _ := dp.Attributes.Value(attribute.Key("error.type"))
		_, dup := out[c.AsString()]
		require.False(t, dup, "two capability_up points for %s", c.AsString())
		out[c.AsString()] = upPoint{up: dp.Value, errorType: et.AsString()}
	}
	return out
}

// errorLogs are the error-level log entries.
func (o *observed) errorLogs() []observer.LoggedEntry {
	return o.logs.FilterLevelExact(zapcore.ErrorLevel).All()
}

// logLine renders an entry the way the collector's console logger does
// (without its timestamp and caller), for the test log.
func logLine(e observer.LoggedEntry) string {
	enc := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{MessageKey: "msg", LevelKey: "level",
		EncodeLevel: zapcore.LowercaseLevelEncoder})
	buf, err := enc.EncodeEntry(e.Entry, e.Context)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(buf.String())
}

func ours(t *testing.T, base *bpftest.Baseline, prefix string) []string {
	t.Helper()
	o, err := base.Ours()
	require.NoError(t, err)
	var names []string
	for _, n := range append(o.Programs, o.Maps...) {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	return names
}

// newBaseline records the BPF objects loaded before the test, for
// requireNothingLoaded.
func newBaseline(t *testing.T) *bpftest.Baseline {
	t.Helper()
	base, err := bpftest.NewBaseline()
	require.NoError(t, err)
	return base
}

// requireNothingLoaded fails the test unless every BPF object loaded
// since base is gone within two seconds; after names the moment, for the
// failure message.
func requireNothingLoaded(t *testing.T, base *bpftest.Baseline, after string) {
	t.Helper()
	left, err := base.WaitGone(2 * time.Second)
	require.NoError(t, err)
	require.True(t, left.Empty(), "left loaded after %s: %v", after, left)
}

// probesOnPort is the default configuration with both probes on port and
// emitting every 100 ms, so that a test sees its counts quickly.
func probesOnPort(port int) *Config {
	cfg := createDefaultConfig()
	cfg.HookPreference = bpftest.HookPreference()
	cfg.CollectionInterval = 100 * time.Millisecond
	cfg.Handshake.Ports = []int{port}
	cfg.Streams.Ports = []int{port}
	cfg.Streams.FlushInterval = 100 * time.Millisecond
	return cfg
}

// handshakeSeries are the attributes of the client's and the server's
// handshake-duration series on port.
func handshakeSeries(port int) (client, server map[string]any) {
	return map[string]any{"network.tcp.handshake.role": "client", "server.port": int64(port)},
		map[string]any{"network.tcp.handshake.role": "server", "server.port": int64(port)}
}
