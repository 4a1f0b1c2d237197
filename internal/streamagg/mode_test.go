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

// A stream that ends at its connection's next request or close ends, for
// its duration and span, at its last write; a client's hang-up before the
// terminator keeps its time where a terminator could have come (http,
// tls), and not where none can be seen (opaque).
func TestDurationEndsAtTheLastByte(t *testing.T) {
	const ms = uint64(1e6)
	for _, tc := range []struct {
		flags   uint32
		head    string
		reason  stream.EndReason
		lastEnd bool
	}{
		{0, sseHead, stream.EndNextRequest, true},
		{0, sseHead, stream.EndClose, true},
		{0, sseHead, stream.EndClientClosed, false},
		{stream.StatsTLS, sseHead, stream.EndClientClosed, false},
		{0, sseHead, stream.EndTerminator, false},
		{0, sseHead, stream.EndReset, false},
		{stream.StatsTLSOpaque, "\x17\x03\x03\x00\x20", stream.EndNextRequest, true},
		{stream.StatsTLSOpaque, "\x17\x03\x03\x00\x20", stream.EndClientClosed, true},
		{stream.StatsTLS, sseHead, stream.EndNextRequest, true},
	} {
		h := newHarness(testConfig())
		recs := simple(1, "/v1/chat/completions", "m").Records(IntervalBounds)
		recs[1].Data = []byte(tc.head)
		end := &recs[2].Stats
		end.Flags = tc.flags
		recs[2].Reason = tc.reason
		lastWrite := end.LastChunkTS
		end.EndTS = lastWrite + 5000*ms // five seconds idle before the next request or close
		want := end.EndTS
		if tc.lastEnd {
			want = lastWrite
		}
		for i := range recs {
			h.a.Add(&recs[i])
		}
		spans := h.a.TakeSpans(nil)
		require.Len(t, spans, 1)
		require.Equal(t, want, spans[0].End, "%v, flags %#x", tc.reason, tc.flags)
		snap := h.a.Snapshot()
		require.Len(t, snap, 1)
		require.InDelta(t, float64(want-end.RequestTS)/1e9, snap[0].Duration.Sum, 1e-9, "%v, flags %#x", tc.reason, tc.flags)
	}
}

// A response head and no chunk after it: its end is the head's write.
func TestHeadOnlyStreamEndsAtItsHead(t *testing.T) {
	h := newHarness(testConfig())
	s := simple(1, "/v1/chat/completions", "")
	s.ChunkAt = nil
	recs := s.Records(IntervalBounds)
	end := &recs[len(recs)-1]
	end.Reason = stream.EndClose
	end.Stats.EndTS = end.Stats.HeadersTS + 5e9
	for i := range recs {
		h.a.Add(&recs[i])
	}
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 1)
	require.Equal(t, end.Stats.HeadersTS, spans[0].End)
}
