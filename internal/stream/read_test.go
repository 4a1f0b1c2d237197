package stream

import (
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"
)

// The records that race a stream's END on another CPU (a second END, a
// PROGRESS) are dropped after it; what begins a stream, another stream's
// records and a stream ended long ago are not.
func TestRecordsAfterTheirEndAreDropped(t *testing.T) {
	var r recentEnds
	a := ID{Sock: 0xffff8881_2345_6780, Gen: 3, Seq: 1}
	next := ID{Sock: a.Sock, Gen: a.Gen, Seq: 2} // the connection's next stream
	drop := func(k Kind, id ID) bool { return r.drop(&Record{Kind: k, ID: id}) }

	require.False(t, drop(KindProgress, a))
	require.False(t, drop(KindEnd, a), "the first END")
	require.True(t, drop(KindEnd, a), "a second END of the same stream")
	require.True(t, drop(KindProgress, a), "a PROGRESS after its END")
	require.True(t, drop(KindBody, a))
	require.False(t, drop(KindRequest, a), "a request is never dropped")
	require.False(t, drop(KindTLSHello, a))
	require.False(t, drop(KindProgress, next))
	require.False(t, drop(KindEnd, next))
	require.True(t, drop(KindProgress, next))
	require.False(t, drop(KindEnd, ID{}), "an ID of zeros is not remembered")
	require.False(t, drop(KindEnd, ID{}))

	// Once 64 other streams ended, a's END is forgotten, and the places'
	// counts are back to what the remembered ends hold.
	for i := range uint64(64) {
		require.False(t, drop(KindEnd, ID{Sock: 0x1000 + i*64, Gen: 1, Seq: uint32(i)}))
	}
	require.False(t, drop(KindProgress, a))
	require.False(t, drop(KindProgress, next))
	held := 0
	for _, m := range r.slots {
		held += bits.OnesCount64(m)
	}
	require.Equal(t, len(r.ids), held, "each remembered end is in one place")
	for i := range uint64(64) {
		require.True(t, drop(KindProgress, ID{Sock: 0x1000 + i*64, Gen: 1, Seq: uint32(i)}))
	}
	require.EqualValues(t, 1, r.lateEnds.Load())
	require.EqualValues(t, 67, r.lateOthers.Load())
}
