package tokenwirereceiver

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// TestShutdownReportsEveryEndedStream: a collector shut down right after a
// burst of streams still reports each of them, exactly once. Their END
// records may still sit in the ring buffer (the reader polls every 100 ms
// and the kernel wakes it only at a quarter full): Shutdown detaches the
// probe and drains the ring before the last export.
func TestShutdownReportsEveryEndedStream(t *testing.T) {
	bpftest.Require(t)
	const streams, events = 200, 20
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: sseHandler{think: 5 * time.Millisecond, interval: 2 * time.Millisecond, events: events}}
	go srv.Serve(ln)
	defer srv.Close()

	cfg := createDefaultConfig()
	cfg.CollectionInterval = time.Hour // only the final flush at Shutdown exports
	cfg.Handshake.Enabled = false
	cfg.Streams.Ports = []int{ln.Addr().(*net.TCPAddr).Port}
	f := NewFactory()
	set := receivertest.NewNopSettings(metadata.Type)
	metrics, traces := new(consumertest.MetricsSink), new(consumertest.TracesSink)
	mr, err := f.CreateMetrics(context.Background(), set, cfg, metrics)
	require.NoError(t, err)
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	require.NoError(t, err)
	require.NoError(t, mr.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			require.NoError(t, mr.Shutdown(context.Background()))
			require.NoError(t, tr.Shutdown(context.Background()))
		}
	}
	defer stop()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json",
				bytes.NewBufferString(`{"model":"m","stream":true}`))
			if err != nil {
				errs <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	stop() // at once: no export interval has passed

	require.Equal(t, streams, traces.SpanCount(), "one span per stream")
	require.EqualValues(t, streams*events, sumChunks(metrics), "chunks of every stream")
}

// TestFirstShutdownFlushesEveryPipeline: the collector tears a pipeline
// down right after its receiver, so whichever handle is shut down first
// must already deliver the last spans and metrics to both pipelines.
func TestFirstShutdownFlushesEveryPipeline(t *testing.T) {
	bpftest.Require(t)
	const streams, events = 10, 5
	for _, tracesFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "traces first", false: "metrics first"}[tracesFirst], func(t *testing.T) {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			require.NoError(t, err)
			srv := &http.Server{Handler: sseHandler{think: time.Millisecond, interval: time.Millisecond, events: events}}
			go srv.Serve(ln)
			defer srv.Close()

			cfg := createDefaultConfig()
			cfg.CollectionInterval = time.Hour
			cfg.Handshake.Enabled = false
			cfg.Streams.Ports = []int{ln.Addr().(*net.TCPAddr).Port}
			f := NewFactory()
			set := receivertest.NewNopSettings(metadata.Type)
			metrics, traces := new(consumertest.MetricsSink), new(consumertest.TracesSink)
			mr, err := f.CreateMetrics(context.Background(), set, cfg, metrics)
			require.NoError(t, err)
			tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
			require.NoError(t, err)
			require.NoError(t, mr.Start(context.Background(), componenttest.NewNopHost()))
			require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
			first, second := mr, component.Component(tr)
			if tracesFirst {
				first, second = tr, mr
			}
			defer func() { require.NoError(t, second.Shutdown(context.Background())) }()

			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for range streams {
				resp, err := client.Get("http://" + ln.Addr().String() + "/")
				require.NoError(t, err)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			require.NoError(t, first.Shutdown(context.Background()))
			// Both sinks are complete before the second handle goes.
			require.Equal(t, streams, traces.SpanCount())
			require.EqualValues(t, streams*events, sumChunks(metrics))
		})
	}
}

// sumChunks adds up tokenwire.stream.chunks over everything a sink got.
func sumChunks(sink *consumertest.MetricsSink) int64 {
	var chunks int64
	for _, md := range sink.AllMetrics() {
		rms := md.ResourceMetrics()
		for i := range rms.Len() {
			sms := rms.At(i).ScopeMetrics()
			for j := range sms.Len() {
				ms := sms.At(j).Metrics()
				for k := range ms.Len() {
					if m := ms.At(k); m.Name() == "tokenwire.stream.chunks" && m.Type() == pmetric.MetricTypeSum {
						for d := range m.Sum().DataPoints().Len() {
							chunks += m.Sum().DataPoints().At(d).IntValue()
						}
					}
				}
			}
		}
	}
	return chunks
}
