package tokenwirereceiver

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// shutdownConfig streams on port only, exporting nothing before
// Shutdown: what the sinks hold afterwards is the final flush.
func shutdownConfig(port int) *Config {
	cfg := createDefaultConfig()
	cfg.CollectionInterval = time.Hour
	cfg.Handshake.Enabled = false
	cfg.Streams.Ports = []int{port}
	return cfg
}

// chunksCounted is tokenwire.stream.chunks summed over every series of the
// last emission (sums are cumulative).
func chunksCounted(s *started) int64 {
	n, _ := sumValue(lastEmission(s.metrics), "tokenwire.stream.chunks", nil)
	return n
}

// TestShutdownReportsEveryEndedStream: a collector shut down right after a
// burst of streams still reports each of them, exactly once. Their END
// records may still sit in the ring buffer (the reader polls every 100 ms
// and the kernel wakes it only at a quarter full): Shutdown detaches the
// probe and drains the ring before the last export.
func TestShutdownReportsEveryEndedStream(t *testing.T) {
	bpftest.Require(t)
	const streams, events = 200, 20
	srv := teststack.ServeHTTP(t, sseServer(5*time.Millisecond, 2*time.Millisecond, events))
	s := start(t, shutdownConfig(srv.Port))

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	require.NoError(t, teststack.FetchAll(client, streams, "POST", srv.URL+"/v1/completions", `{"model":"m","stream":true}`))
	s.shutdown() // at once: no export interval has passed

	require.Equal(t, streams, s.traces.SpanCount(), "one span per stream")
	require.EqualValues(t, streams*events, chunksCounted(s), "chunks of every stream")
}

// TestFirstShutdownFlushesEveryPipeline: the collector tears a pipeline
// down right after its receiver, so whichever handle is shut down first
// must already deliver the last spans and metrics to both pipelines.
func TestFirstShutdownFlushesEveryPipeline(t *testing.T) {
	bpftest.Require(t)
	const streams, events = 10, 5
	for _, tracesFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "traces first", false: "metrics first"}[tracesFirst], func(t *testing.T) {
			srv := teststack.ServeHTTP(t, sseServer(time.Millisecond, time.Millisecond, events))
			s := start(t, shutdownConfig(srv.Port))
			first := s.metricsRecv
			if tracesFirst {
				first = s.tracesRecv
			}

			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for range streams {
				require.NoError(t, teststack.Fetch(client, "GET", srv.URL+"/", ""))
			}
			require.NoError(t, first.Shutdown(context.Background()))
			// Both sinks are complete before the second handle goes.
			require.Equal(t, streams, s.traces.SpanCount())
			require.EqualValues(t, streams*events, chunksCounted(s))
		})
	}
}

// TestShutdownSaysWhatIsUnderWay: a stream still under way at Shutdown
// has no end to report; the log says how many there were.
func TestShutdownSaysWhatIsUnderWay(t *testing.T) {
	bpftest.Require(t)
	release := make(chan struct{})
	srv := teststack.ServeHTTP(t, &teststack.SSEServer{HeadersFirst: true, Hold: release})
	defer close(release)
	o := startObserved(t, shutdownConfig(srv.Port), nil, nil)
	require.NoError(t, o.startErr)
	go teststack.Fetch(nil, "GET", srv.URL+"/", "")
	agg := o.recv.(*handle).r.stAgg
	require.Eventually(t, func() bool { return agg.OpenCount() == 1 }, 5*time.Second, 10*time.Millisecond,
		"the stream's head reached the aggregator")
	o.shutdown(t)
	lines := o.logs.FilterMessage("tokenwire stopped with streams whose end it had not seen; they get no span or duration").All()
	require.Len(t, lines, 1)
	require.EqualValues(t, 1, lines[0].ContextMap()["streams"])
}
