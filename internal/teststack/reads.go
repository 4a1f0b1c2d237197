package teststack

import (
	"testing"
	"time"
)

// ReadsOf is how many reads a client took to receive events that a server
// wrote interval apart, from when each event reached the client (arrivals,
// in nanoseconds on one clock, in order): an event that arrived less than
// interval/2 after the one before came in the same read. A client's chunk
// is a read, and a client descheduled for longer than the interval reads
// the events waiting for it at once. A client held up between a read and
// its timestamp can make two reads look like one, never one like two: the
// count is at most the reads made.
func ReadsOf(arrivals []uint64, interval time.Duration) int {
	if len(arrivals) == 0 {
		return 0
	}
	reads := 1
	for i := 1; i < len(arrivals); i++ {
		if arrivals[i]-arrivals[i-1] >= uint64(interval/2) {
			reads++
		}
	}
	return reads
}

// ChunkRange is how many chunks tokenwire may count for a client's call
// whose events reached the client at arrivals, written interval apart:
// one per event when no two came in one read (lo == hi), else from the
// reads ReadsOf finds to the events. It logs the merged reads, naming
// the call what, so that a failure's range explains itself.
func ChunkRange(tb testing.TB, what string, arrivals []uint64, interval time.Duration) (lo, hi int) {
	tb.Helper()
	lo, hi = ReadsOf(arrivals, interval), len(arrivals)
	if lo < hi {
		tb.Logf("%s: the client read its %d events in %d reads at most (arrivals %v ns)", what, hi, lo, arrivals)
	}
	return lo, hi
}
