package tokenwirereceiver

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/streamagg"
	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// The stream sums' attribute names come from metadata.yaml (mdatagen), the
// histograms' and spans' from internal/genai's semconv.go, which pins the
// conventions' release. They must be the same names: a rename is made in
// semconv.go, and this test then names the metadata.yaml attribute to
// rename with it.
func TestSumAttributesAreTheConventionsNames(t *testing.T) {
	for generated, pinned := range map[metadata.TokenwireStreamChunksMetricAttributeKey]string{
		metadata.TokenwireStreamChunksMetricAttributeKeyServerPort:            genai.AttrServerPort,
		metadata.TokenwireStreamChunksMetricAttributeKeyHTTPRequestMethod:     genai.AttrHTTPRequestMethod,
		metadata.TokenwireStreamChunksMetricAttributeKeyHTTPRoute:             genai.AttrHTTPRoute,
		metadata.TokenwireStreamChunksMetricAttributeKeyGenAiRequestModel:     genai.AttrRequestModel,
		metadata.TokenwireStreamChunksMetricAttributeKeyGenAiOperationName:    genai.AttrOperationName,
		metadata.TokenwireStreamChunksMetricAttributeKeyGenAiProviderName:     genai.AttrProviderName,
		metadata.TokenwireStreamChunksMetricAttributeKeyGenAiResponseModel:    genai.AttrResponseModel,
		metadata.TokenwireStreamChunksMetricAttributeKeyTokenwireStreamMode:   attrStreamMode,
		metadata.TokenwireStreamChunksMetricAttributeKeyTokenwireStreamFormat: attrStreamFormat,
	} {
		require.Equal(t, pinned, string(generated), "metadata.yaml's attribute %q is not the pinned name", generated)
	}

	// One stream that knows every attribute: each stream metric, sum or
	// histogram, carries the same attribute names.
	r := translator(t)
	first := llmwire.Chunked(llmwire.VLLMChatFirst)
	recs := streamaggtest.Stream{PID: goldenPID, Request: "POST /v1/chat/completions HTTP/1.1\r\n\r\n{\"model\":\"m\"}",
		Head: llmwire.UvicornHead, HeadBytes: uint32(len(llmwire.UvicornHead)), HeadAt: 1, ChunkAt: []uint64{10, 20, 30},
		ChunkBytes: 10, FirstBody: first, Tails: []string{llmwire.Chunked(llmwire.VLLMChatUsage)}}.Records(streamagg.IntervalBounds)
	for i := range recs {
		r.stAgg.Add(&recs[i])
	}
	md := r.metricsNow(pcommon.Timestamp(2e9))
	names := map[string][]string{}
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		ms := rms.At(i).ScopeMetrics().At(0).Metrics()
		for j := range ms.Len() {
			m := ms.At(j)
			var attrs pcommon.Map
			switch m.Type() {
			case pmetric.MetricTypeSum:
				attrs = m.Sum().DataPoints().At(0).Attributes()
			case pmetric.MetricTypeHistogram:
				attrs = m.Histogram().DataPoints().At(0).Attributes()
			}
			var keys []string
			for k := range attrs.All() {
				if k != genai.AttrTokenType { // token usage's own
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			names[m.Name()] = keys
		}
	}
	want := []string{genai.AttrOperationName, genai.AttrProviderName, genai.AttrRequestModel, genai.AttrResponseModel,
		genai.AttrHTTPRequestMethod, genai.AttrHTTPRoute, genai.AttrServerPort, attrStreamFormat, attrStreamMode}
	slices.Sort(want)
	for _, name := range []string{"tokenwire.stream.chunks", "tokenwire.stream.bytes", genai.MetricServerTimeToFirstToken,
		genai.MetricServerRequestDuration, "tokenwire.stream.chunk.interval", genai.MetricServerTimePerOutputToken,
		genai.MetricServerTokenUsage} {
		require.Equal(t, want, names[name], name)
	}
}
