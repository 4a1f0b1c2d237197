package tokenwirereceiver

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/histogram"
	"github.com/tokenwire/tokenwire/internal/streamagg"
)

// The GenAI client metrics of calls this host makes (streams.clients),
// per the conventions' client instruments (genai.Metric*): each series of
// client calls is one point per metric, with the client attributes
// (putStreamAttrs). Client calls have no tokenwire.stream.chunks or
// .bytes sums: those are the servers'; a call's chunks are on its span,
// and time_per_output_chunk counts the intervals between them.
var (
	clientDurationDef = histogramDef{
		name: genai.MetricClientOperationDuration,
		description: "Time from the request's last byte written by the client to the end of the streamed response it " +
			"read (terminator, the server's close, the client's close); error.type when the stream reported an error " +
			"or the status was 4xx or 5xx.",
		unit:   genai.UnitSeconds,
		bounds: streamagg.DurationBounds,
	}
	clientTTFCDef = histogramDef{
		name: genai.MetricClientOperationTimeToFirstChunk,
		description: "Time from the request's last byte written by the client to the client's first read that " +
			"returned response body bytes.",
		unit:   genai.UnitSeconds,
		bounds: streamagg.TTFCBounds,
	}
	clientTPOCDef = histogramDef{
		name: genai.MetricClientOperationTimePerOutputChunk,
		description: "Time between the client's consecutive reads of response body chunks (reads closer than " +
			"streams.coalesce are one chunk); buckets are tokenwire's chunk-interval buckets, which the kernel counts into.",
		unit:   genai.UnitSeconds,
		bounds: streamagg.IntervalBounds,
	}
	clientTokenUsageDef = histogramDef{
		name: genai.MetricClientTokenUsage,
		description: "Tokens per call, by gen_ai.token.type (input, output), as the stream's own final usage " +
			"reports them; calls that reported none are not counted.",
		unit:   genai.UnitToken,
		bounds: streamagg.TokenBounds,
	}
)

// splitClients returns the server series and the client series of one
// process's series.
func splitClients(series []streamagg.SeriesSnapshot) (servers, clients []streamagg.SeriesSnapshot) {
	for _, s := range series {
		if s.Key.Client {
			clients = append(clients, s)
		} else {
			servers = append(servers, s)
		}
	}
	return servers, clients
}

// addClientHistograms appends the client metrics of series (one
// process's client series) to ms.
func addClientHistograms(ms pmetric.MetricSlice, series []streamagg.SeriesSnapshot, start, now pcommon.Timestamp) {
	if len(series) == 0 {
		return
	}
	duration := newHistogramPoints(ms, &clientDurationDef, start, now)
	for _, s := range series {
		if attrs, ok := duration.add(s.Duration); ok {
			putStreamAttrs(attrs, s.Key)
		}
		for _, e := range s.Errors {
			if attrs, ok := duration.add(e.Duration); ok {
				putStreamAttrs(attrs, s.Key)
				attrs.PutStr(genai.AttrErrorType, e.Type)
			}
		}
	}
	for _, p := range []struct {
		def *histogramDef
		of  func(*streamagg.Series) *histogram.Histogram
	}{
		{&clientTTFCDef, func(s *streamagg.Series) *histogram.Histogram { return s.TTFT }},
		{&clientTPOCDef, func(s *streamagg.Series) *histogram.Histogram { return s.Interval }},
	} {
		points := newHistogramPoints(ms, p.def, start, now)
		for _, s := range series {
			if attrs, ok := points.add(p.of(&s.Series)); ok {
				putStreamAttrs(attrs, s.Key)
			}
		}
	}
	addTokenPoints(newHistogramPoints(ms, &clientTokenUsageDef, start, now), series, putStreamAttrs)
}
