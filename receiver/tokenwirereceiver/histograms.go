package tokenwirereceiver

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tokenwire/tokenwire/internal/handshakeagg"
	"github.com/tokenwire/tokenwire/internal/histogram"
	"github.com/tokenwire/tokenwire/internal/streamagg"
)

// Histogram metrics: their names, units and buckets live here rather than in
// metadata.yaml, whose mdatagen cannot generate histograms
// (internal/tools/go.mod says why); the component's README documents them
// next to documentation.md.

// histogramDef describes one histogram metric.
type histogramDef struct {
	name, description, unit string
	bounds                  []float64
}

var (
	handshakeDurationDef = histogramDef{
		name: "tokenwire.tcp.handshake.duration",
		description: "TCP handshake duration: for the client role from connect() sending the SYN to ESTABLISHED, " +
			"for the server role from the first SYN-ACK sent to the final ACK (ESTABLISHED).",
		unit:   "s",
		bounds: handshakeagg.Bounds,
	}
	ttftDef = histogramDef{
		name: "gen_ai.server.time_to_first_token",
		description: "Time from the request's last byte reaching the server socket to the first body chunk " +
			"of the response being written.",
		unit:   "s",
		bounds: streamagg.TTFTBounds,
	}
	requestDurationDef = histogramDef{
		name:        "gen_ai.server.request.duration",
		description: "Time from the request's last byte reaching the server socket to the end of the streamed response.",
		unit:        "s",
		bounds:      streamagg.DurationBounds,
	}
	chunkIntervalDef = histogramDef{
		name:        "tokenwire.stream.chunk.interval",
		description: "Time between the starts of consecutive body chunks of a streamed response.",
		unit:        "s",
		bounds:      streamagg.IntervalBounds,
	}
)

// histogramPoints appends def's metric to ms on the first call and a
// cumulative data point per call after that.
type histogramPoints struct {
	def        *histogramDef
	ms         pmetric.MetricSlice
	dps        pmetric.HistogramDataPointSlice
	start, now pcommon.Timestamp
	started    bool
}

func newHistogramPoints(ms pmetric.MetricSlice, def *histogramDef, start, now pcommon.Timestamp) *histogramPoints {
	return &histogramPoints{def: def, ms: ms, start: start, now: now}
}

// add writes h as a data point; an empty histogram writes none. The
// caller sets the point's attributes.
func (p *histogramPoints) add(h *histogram.Histogram) (pcommon.Map, bool) {
	if h.Count == 0 {
		return pcommon.Map{}, false
	}
	if !p.started {
		p.started = true
		m := p.ms.AppendEmpty()
		m.SetName(p.def.name)
		m.SetDescription(p.def.description)
		m.SetUnit(p.def.unit)
		p.dps = m.SetEmptyHistogram().DataPoints()
		m.Histogram().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	}
	dp := p.dps.AppendEmpty()
	dp.SetStartTimestamp(p.start)
	dp.SetTimestamp(p.now)
	dp.SetCount(h.Count)
	dp.SetSum(h.Sum)
	if h.HasMinMax {
		dp.SetMin(h.Min)
		dp.SetMax(h.Max)
	}
	dp.ExplicitBounds().FromRaw(p.def.bounds)
	dp.BucketCounts().FromRaw(h.Counts)
	return dp.Attributes(), true
}
