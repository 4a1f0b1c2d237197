package streamagg

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tokenwire/tokenwire/internal/stream"
)

// A stream the kernel read as TLS plaintext is HTTP in mode tls, on its
// series and its span; one timed from TLS record headers stays opaque.
func TestTLSModes(t *testing.T) {
	for _, tc := range []struct {
		flags uint32
		head  string
		want  Mode
	}{
		{stream.StatsTLS, sseHead, ModeTLS},
		{0, sseHead, ModeHTTP},
		{stream.StatsTLSOpaque, "\x17\x03\x03\x00\x20", ModeOpaque},
	} {
		h := newHarness(testConfig())
		recs := simple(1, "/v1/chat/completions", "m").Records(IntervalBounds)
		recs[1].Data = []byte(tc.head)
		recs[2].Stats.Flags = tc.flags
		for i := range recs {
			h.a.Add(&recs[i])
		}
		snap := h.a.Snapshot()
		require.Len(t, snap, 1)
		require.Equal(t, tc.want, snap[0].Key.Mode, "flags %#x", tc.flags)
		spans := h.a.TakeSpans(nil)
		require.Len(t, spans, 1)
		require.Equal(t, tc.want.String(), spans[0].Mode.String())
	}
	require.Equal(t, "tls", ModeTLS.String())
}
