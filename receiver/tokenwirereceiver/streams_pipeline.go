package tokenwirereceiver

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"

	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// StreamAggregator is the receiver's user-space stream stage on its own:
// it folds decoded stream records into the state the receiver keeps and
// builds the same metrics and spans from it. It exists for benchmarks
// (bench/pipeline measures ring buffer -> record -> pdata with it); the
// receiver itself does not use it. Not safe for concurrent use.
type StreamAggregator struct {
	s     *streamStats
	mb    *metadata.MetricsBuilder
	host  string
	start pcommon.Timestamp
	// Skipped counts streams not reported (not streamed, no response,
	// filtered); Evicted counts open streams dropped for room.
	Skipped, Evicted uint64
}

// NewStreamAggregator returns an aggregator with the receiver's default
// streams settings, spans on or off, reporting under host.
func NewStreamAggregator(set receiver.Settings, spans bool, host string) *StreamAggregator {
	cfg := createDefaultConfig()
	cfg.Streams.Spans = spans
	a := &StreamAggregator{
		mb:    metadata.NewMetricsBuilder(cfg.MetricsBuilderConfig, set),
		host:  host,
		start: pcommon.NewTimestampFromTime(time.Now()),
	}
	a.s = newStreamStats(&cfg.Streams, wallOffset(), func(string) { a.Skipped++ }, func() { a.Evicted++ })
	return a
}

// Add folds one record in, as the receiver's read loop does.
func (a *StreamAggregator) Add(rec *stream.Record) { a.s.add(rec) }

// Metrics builds the cumulative stream metrics as of now, as the receiver
// does at each collection interval.
func (a *StreamAggregator) Metrics(now pcommon.Timestamp) pmetric.Metrics {
	hist := pmetric.NewMetrics()
	a.s.record(a.mb, hist, a.host, a.start, now)
	md := a.mb.Emit()
	mergeResources(md, hist)
	return md
}

// Spans returns the spans of the streams that ended since the last call,
// as the receiver's span flush does.
func (a *StreamAggregator) Spans() ptrace.Traces { return a.s.takeSpans() }
