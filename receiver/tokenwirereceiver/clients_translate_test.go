package tokenwirereceiver

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/streamagg"
	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// A client call becomes the GenAI client histograms (the conventions'
// names, the client attributes, no HTTP ones, no stream sums) and a
// CLIENT span named "{operation} {model}".
func TestClientCallTranslation(t *testing.T) {
	r := translator(t)
	recs := streamaggtest.Stream{PID: goldenPID, ClientCall: true,
		Request: "POST /v1/chat/completions HTTP/1.1\r\nHost: api.example.test\r\n\r\n{\"model\":\"m\"}",
		Head:    llmwire.UvicornHead, HeadBytes: uint32(len(llmwire.UvicornHead)), HeadAt: 1, ChunkAt: []uint64{10, 20, 30},
		ChunkBytes: 10, FirstBody: llmwire.Chunked(llmwire.VLLMChatFirst), Tails: []string{llmwire.Chunked(llmwire.VLLMChatUsage)},
	}.Records(streamagg.IntervalBounds)
	for i := range recs {
		r.stAgg.Add(&recs[i])
	}
	md := r.metricsNow(pcommon.Timestamp(2e9))
	got := map[string]pcommon.Map{}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			m := ms.At(j)
			require.Equal(t, pmetric.MetricTypeHistogram, m.Type(), "%s: client calls have no sums", m.Name())
			got[m.Name()] = m.Histogram().DataPoints().At(0).Attributes()
		}
	}
	require.ElementsMatch(t, []string{genai.MetricClientOperationDuration, genai.MetricClientOperationTimeToFirstChunk,
		genai.MetricClientOperationTimePerOutputChunk, genai.MetricClientTokenUsage}, keys(got))
	a := got[genai.MetricClientOperationDuration].AsRaw()
	require.Equal(t, map[string]any{genai.AttrServerAddress: "api.example.test", genai.AttrServerPort: int64(8000),
		genai.AttrRequestModel: "m", genai.AttrOperationName: "chat", genai.AttrProviderName: "openai",
		genai.AttrResponseModel: a[genai.AttrResponseModel], attrStreamMode: "http", attrStreamFormat: "openai"}, a)

	td := r.traceData(r.stAgg.TakeSpans(nil))
	require.Equal(t, 1, td.SpanCount())
	sp := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	require.Equal(t, ptrace.SpanKindClient, sp.Kind())
	require.Equal(t, "chat m", sp.Name())
	sa := sp.Attributes().AsRaw()
	require.Equal(t, "api.example.test", sa[genai.AttrServerAddress])
	require.EqualValues(t, 8000, sa[genai.AttrServerPort])
	require.NotContains(t, sa, genai.AttrClientAddress)
}

func keys(m map[string]pcommon.Map) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
