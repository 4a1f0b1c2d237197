package tokenwirereceiver

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tokenwire/tokenwire/internal/stream"
)

// Histogram metrics. mdatagen v0.159.0 cannot generate a MetricsBuilder for
// histograms (see metadata.yaml), so their names, units and buckets live
// here and the README documents them next to documentation.md.

// histogramDef describes one histogram metric.
type histogramDef struct {
	name, description, unit string
	bounds                  []float64
	// noMinMax is set when observations arrive as bucket counts (from the
	// kernel), so min and max are unknown.
	noMinMax bool
}

// handshakeBounds covers loopback and LAN handshakes (tens of microseconds)
// up to SYN retransmissions (1 s, 3 s, 7 s with the default RTO).
var handshakeBounds = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

var handshakeDurationDef = histogramDef{
	name: "tokenwire.tcp.handshake.duration",
	description: "TCP handshake duration: for the client role from connect() sending the SYN to ESTABLISHED, " +
		"for the server role from the first SYN-ACK sent to the final ACK (ESTABLISHED).",
	unit:   "s",
	bounds: handshakeBounds,
}

// Stream histograms. Bounds follow the semantic conventions' advice for
// gen_ai.server.time_to_first_token and gen_ai.server.request.duration. The
// chunk interval uses the advice for gen_ai.server.time_per_output_token
// with three finer buckets below 10 ms (fast token streams); the kernel
// keeps its histogram with exactly these bounds.
var (
	ttftDef = histogramDef{
		name: "gen_ai.server.time_to_first_token",
		description: "Time from the request's last byte reaching the server socket to the first body chunk " +
			"of the response being written.",
		unit:   "s",
		bounds: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10},
	}
	requestDurationDef = histogramDef{
		name:        "gen_ai.server.request.duration",
		description: "Time from the request's last byte reaching the server socket to the end of the streamed response.",
		unit:        "s",
		bounds:      []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92},
	}
	chunkIntervalDef = histogramDef{
		name:        "tokenwire.stream.chunk.interval",
		description: "Time between the starts of consecutive body chunks of a streamed response.",
		unit:        "s",
		bounds:      secondsOf(stream.DefaultGapBounds),
		noMinMax:    true,
	}
)

// secondsOf converts durations to the seconds a histogram in s reports.
func secondsOf(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// histogram accumulates observations for one attribute set. Buckets are
// cumulative over the receiver's lifetime, like the sums.
type histogram struct {
	counts   []uint64 // len(bounds)+1
	count    uint64
	sum      float64
	min, max float64
}

func newHistogram(def *histogramDef) *histogram {
	return &histogram{counts: make([]uint64, len(def.bounds)+1)}
}

func (h *histogram) observe(bounds []float64, v float64) {
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	h.counts[i]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if h.count == 0 || v > h.max {
		h.max = v
	}
	h.count++
	h.sum += v
}

// addCounts folds in bucket counts and their sum, as the kernel reports
// chunk intervals.
func (h *histogram) addCounts(counts []uint32, sum float64) {
	for i, c := range counts {
		if i < len(h.counts) {
			h.counts[i] += uint64(c)
			h.count += uint64(c)
		}
	}
	h.sum += sum
}

// appendTo writes the histogram as a cumulative data point.
func (h *histogram) appendTo(dps pmetric.HistogramDataPointSlice, def *histogramDef, start, now pcommon.Timestamp) pmetric.HistogramDataPoint {
	dp := dps.AppendEmpty()
	dp.SetStartTimestamp(start)
	dp.SetTimestamp(now)
	dp.SetCount(h.count)
	dp.SetSum(h.sum)
	if !def.noMinMax && h.count > 0 {
		dp.SetMin(h.min)
		dp.SetMax(h.max)
	}
	dp.ExplicitBounds().FromRaw(def.bounds)
	dp.BucketCounts().FromRaw(h.counts)
	return dp
}

// newHistogramMetric appends an empty cumulative histogram metric.
func newHistogramMetric(ms pmetric.MetricSlice, def *histogramDef) pmetric.Metric {
	m := ms.AppendEmpty()
	m.SetName(def.name)
	m.SetDescription(def.description)
	m.SetUnit(def.unit)
	m.SetEmptyHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	return m
}
