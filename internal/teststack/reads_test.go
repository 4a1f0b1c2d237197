package teststack

import (
	"testing"
	"time"
)

func TestReadsOf(t *testing.T) {
	ms := uint64(time.Millisecond)
	for _, tc := range []struct {
		arrivals []uint64
		want     int
	}{
		{nil, 0},
		{[]uint64{5 * ms}, 1},
		{[]uint64{0, 50 * ms, 100 * ms, 150 * ms}, 4},
		{[]uint64{0, 50 * ms, 50*ms + 20_000, 150 * ms}, 3}, // the second and third in one read
		{[]uint64{0, 24 * ms, 80 * ms}, 2},
		{[]uint64{0, 25 * ms}, 2},
	} {
		if got := ReadsOf(tc.arrivals, 50*time.Millisecond); got != tc.want {
			t.Errorf("ReadsOf(%v) = %d, want %d", tc.arrivals, got, tc.want)
		}
	}
}

// curl's stdout is stamped per SSE data line, at the write that completes
// it; [DONE] is not an event.
func TestEventStamps(t *testing.T) {
	var e eventStamps
	for _, w := range []string{"data: {\"a\":1}\n\ndata: {\"a\"", ":2}\n\n", "data: [DONE]\n\n"} {
		e.Write([]byte(w))
	}
	if len(e.eventNS) != 2 || e.eventNS[0] > e.eventNS[1] {
		t.Errorf("stamps %v, want two in order", e.eventNS)
	}
	if got := e.body.String(); got != "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n" {
		t.Errorf("body %q", got)
	}
}
