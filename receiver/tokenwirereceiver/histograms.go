package tokenwirereceiver

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tokenwire/tokenwire/internal/genai"
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
		name: genai.MetricServerTimeToFirstToken,
		description: "Time from the request's last byte reaching the server socket to the first body chunk " +
			"of the response being written.",
		unit:   genai.UnitSeconds,
		bounds: streamagg.TTFTBounds,
	}
	requestDurationDef = histogramDef{
		name: genai.MetricServerRequestDuration,
		description: "Time from the request's last byte reaching the server socket to the end of the streamed response; " +
			"error.type when the stream reported an error or the status was 4xx or 5xx.",
		unit:   genai.UnitSeconds,
		bounds: streamagg.DurationBounds,
	}
	timePerOutputTokenDef = histogramDef{
		name: genai.MetricServerTimePerOutputToken,
		description: "Time per output token after the first: (request duration - time to first token) / " +
			"(output tokens - 1), for streams that reported their final output tokens (at least 2) and no error.",
		unit:   genai.UnitSeconds,
		bounds: streamagg.TPOTBounds,
	}
	tokenUsageDef = histogramDef{
		name: genai.MetricServerTokenUsage,
		description: "Tokens per streamed response, by gen_ai.token.type (input, output), as the stream's own final " +
			"usage reports them; streams that reported none are not counted.",
		unit:   genai.UnitToken,
		bounds: streamagg.TokenBounds,
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
