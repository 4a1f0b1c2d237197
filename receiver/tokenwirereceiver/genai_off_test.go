package tokenwirereceiver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/genai"
)

// TestResponseDetailsOff streams every format with streams.response_details
// off: no response byte after the head reaches the receiver, so spans keep
// what the request said (operation, request model) and the stream's
// timing and counts, and carry nothing read from the response (format,
// provider from the format, response model and id, usage, finish reasons;
// the format is unknown).
func TestResponseDetailsOff(t *testing.T) {
	bpftest.Require(t)
	cases := wireCases()
	_, port := serveWireCases(t)
	cfg := streamConfig(port, 200*time.Millisecond)
	cfg.Streams.ResponseDetails = false
	s := start(t, cfg)
	for i, c := range cases {
		fetch(t, wireRequest(t, port, i, c))
	}
	require.Eventually(t, func() bool { return s.traces.SpanCount() == len(cases) }, 10*time.Second, 20*time.Millisecond)
	s.shutdown()
	spans := allSpans(s.traces.AllTraces())
	require.Len(t, spans, len(cases))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := c.want
			w.format, w.provider, w.respModel, w.respID, w.apiType, w.errType = "unknown", "", "", "", "", ""
			w.input, w.output, w.reasons = -1, -1, nil
			checkGenAISpan(t, spans[i].Attributes(), port, genaiCase{path: c.path, want: w})
			_, ok := spans[i].Attributes().Get(genai.AttrResponseTimeToFirstChunk)
			require.True(t, ok, "the first chunk's time is the stream's own, not a response detail")
		})
	}
}
