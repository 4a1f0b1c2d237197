package tokenwirereceiver

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap/zaptest"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/tlsprobe"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// tlsReceiver is a receiver serving a metrics and a traces pipeline whose
// self-telemetry the test reads back.
type tlsReceiver struct {
	r       *tokenwireReceiver
	tel     *componenttest.Telemetry
	metrics *consumertest.MetricsSink
	traces  *consumertest.TracesSink
	stop    func()
}

// tlsConfig watches port for streams, TLS read through uprobes (scanning
// for servers every 100 ms) unless libraries leaves the server's out.
func tlsConfig(port int, libraries ...string) *Config {
	cfg := streamConfig(port, 100*time.Millisecond)
	cfg.HookPreference = bpftest.HookPreference()
	cfg.Streams.TLS.ScanInterval = MinTLSScanInterval
	if libraries != nil {
		cfg.Streams.TLS.Libraries = libraries
	}
	return cfg
}

func startTLSReceiver(t *testing.T, cfg *Config) *tlsReceiver {
	t.Helper()
	s := &tlsReceiver{tel: componenttest.NewTelemetry(), metrics: new(consumertest.MetricsSink), traces: new(consumertest.TracesSink)}
	t.Cleanup(func() { require.NoError(t, s.tel.Shutdown(context.Background())) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = s.tel.NewTelemetrySettings()
	if os.Getenv("TW_DEBUG_LOG") != "" {
		set.Logger = zaptest.NewLogger(t)
	}
	f := NewFactory()
	mr, err := f.CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	tr, err := f.CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	s.r = mr.(*handle).r
	require.NoError(t, mr.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	stopped := false
	s.stop = func() {
		if !stopped {
			stopped = true
			require.NoError(t, mr.Shutdown(context.Background()))
			require.NoError(t, tr.Shutdown(context.Background()))
		}
	}
	t.Cleanup(s.stop)
	return s
}

// waitTarget waits until pid has a TLS target with the result given
// (probed, excluded, unprobeable) and returns it.
func (s *tlsReceiver) waitTarget(t *testing.T, pid int, result string) tlsprobe.Target {
	t.Helper()
	var found tlsprobe.Target
	ok := assert.Eventually(t, func() bool {
		for _, tg := range s.r.streams.TLSTargets() {
			if int(tg.PID) == pid && tlsResult(tg) == result {
				found = tg
				return true
			}
		}
		return false
	}, 60*time.Second, 20*time.Millisecond, "pid %d never %s", pid, result)
	if !ok {
		t.Fatalf("pid %d: targets %+v; what the scan would see: %s", pid, s.r.streams.TLSTargets(), teststack.TLSScanView(pid))
	}
	return found
}

// telemetryPoints reads an int64 self-metric's points, keyed by their
// attributes ("library=openssl,result=probed"); none when it has none.
func (s *tlsReceiver) telemetryPoints(t *testing.T, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := s.tel.GetMetric(name)
	if err != nil {
		return out // no point observed yet
	}
	add := func(set attribute.Set, v int64) {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		out[strings.Join(parts, ",")] += v
	}
	switch d := m.Data.(type) {
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			add(dp.Attributes, dp.Value)
		}
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			add(dp.Attributes, dp.Value)
		}
	default:
		t.Fatalf("%s is a %T", name, m.Data)
	}
	return out
}

// tlsRun is one request a test client made: when it was sent and when its
// first event arrived (CLOCK_MONOTONIC through time.Time's monotonic
// reading): no kernel TTFT of it can be longer than between the two.
type tlsRun struct {
	sent, firstEvent time.Time
	eventNS          []uint64 // when each event but [DONE] arrived (teststack.MonotonicNow)
	doneNS           uint64   // when [DONE] arrived, 0 if it did not
}

// goTLSNewConns is how many calls TestGoTLSClientCalls makes on a
// connection of their own after its keep-alive ones: before the probes
// left a server's writes alone, every one of 3 runs had calls (8 of the
// 33) whose request was taken from the server's buffer.
const goTLSNewConns = 8

// chatsOnNewConns makes n calls to url, each on a connection of its own
// that it closes before the next; the pause lets the server's goroutine
// for the closed connection end, so that the runtime can give its g to
// the next connection's goroutines.
func chatsOnNewConns(t *testing.T, cert *teststack.TLSCert, url string, n int) []tlsRun {
	t.Helper()
	var runs []tlsRun
	for range n {
		client := cert.HTTPClient(true)
		runs = append(runs, chat(t, client, url))
		client.Transport.(*http.Transport).CloseIdleConnections()
		time.Sleep(20 * time.Millisecond)
	}
	return runs
}

// chat sends one streamed chat request with client and reads the response
// to its end, noting when each SSE event arrived.
func chat(t *testing.T, client *http.Client, url string) tlsRun {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/chat/completions", bytes.NewBufferString(`{"model":"llama-3-8b","stream":true}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	run := tlsRun{sent: time.Now()}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if teststack.IsDoneLine(sc.Text()) {
			run.doneNS = teststack.MonotonicNow()
		}
		if !teststack.IsEventLine(sc.Text()) {
			continue
		}
		if run.firstEvent.IsZero() {
			run.firstEvent = time.Now()
		}
		run.eventNS = append(run.eventNS, teststack.MonotonicNow())
	}
	require.NoError(t, sc.Err())
	require.False(t, run.firstEvent.IsZero(), "no event")
	return run
}
