// Package streamaggtest writes the stream probe's records the way the
// kernel would for streams described in a few numbers, so that the
// user-space side (aggregation, translation to OTLP) is tested and
// benchmarked without a kernel.
package streamaggtest

import (
	"crypto/tls"
	"net"
	"net/netip"
	"time"

	"github.com/tokenwire/tokenwire/internal/stream"
)

const ms = uint64(time.Millisecond)

// Addresses of the synthetic streams: a server and its client, from the
// documentation ranges.
var (
	Server = netip.MustParseAddrPort("192.0.2.1:8000")
	Client = netip.MustParseAddrPort("198.51.100.7:40000")
)

// SSEHead is a chunked text/event-stream response head.
const SSEHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// Stream describes one stream. The request reaches the socket at 1 s
// (kernel time), the head is written HeadAt ms later, body chunks at the
// ChunkAt offsets (ms), and the stream ends 1 ms after the last chunk.
type Stream struct {
	PID       uint32
	Request   string // the request's head and body as the server read them
	Head      string // what the kernel took of the response's first write
	HeadBytes uint32 // bytes of the first write (HeadBody: beyond the head)
	HeadAt    uint64
	ChunkAt   []uint64
	// ChunkBytes is each kernel-counted chunk's size.
	ChunkBytes uint64
	// Sock and Seq identify it (stream.ID; Gen is 1).
	Sock uint64
	Seq  uint32
	// RequestSlice, when set, sends the request in REQUEST records of at
	// most this many bytes, as the kernel slices what one read took
	// (stream.RequestSlice) or the server read it.
	RequestSlice int
	// FirstBody is the start of the first body write (a BODY record with
	// BodyFirst) and Tails the ends of the writes the kernel took for a
	// stream's last events (BodyTail), in order; both as the kernel cuts
	// them (at most stream.PeekMax bytes).
	FirstBody string
	Tails     []string
	// FirstBodyOffset is where FirstBody starts in its write (the kernel
	// passes over a buffer of chunk framing).
	FirstBodyOffset uint32
	// ClientCall makes it a call this host made (stream.Stats.Client): the
	// request written by Client, the response read from Server.
	ClientCall bool
}

// Records returns the stream's request, response and END records; the
// END carries the chunk-interval counts of the given bounds (s).
func (s Stream) Records(intervalBounds []float64) []stream.Record {
	id := stream.ID{Sock: 0xffff8880_00001000 + s.Sock, Gen: 1, Seq: s.Seq}
	st := stream.Stats{
		RequestTS: 1000 * ms, HeadersTS: 1000*ms + s.HeadAt*ms, HeadBytes: s.HeadBytes, PID: s.PID,
		Local: Server, Remote: Client,
	}
	if s.ClientCall {
		st.Local, st.Remote, st.Flags = Client, Server, stream.StatsClient
	}
	for i, at := range s.ChunkAt {
		ts := 1000*ms + at*ms
		if i == 0 {
			st.FirstChunkTS = ts
		} else {
			gap := ts - st.LastChunkTS
			st.GapSum += gap
			st.GapMax = max(st.GapMax, gap)
			b := 0
			for b < len(intervalBounds) && float64(gap)/1e9 > intervalBounds[b] {
				b++
			}
			st.GapCounts[b]++
		}
		st.LastChunkTS = ts
		st.Chunks++
		st.Bytes += s.ChunkBytes
	}
	st.EndTS = st.LastChunkTS + ms
	var recs []stream.Record
	n := s.RequestSlice
	if n <= 0 {
		n = max(len(s.Request), 1)
	}
	for off := 0; off < len(s.Request) || off == 0; off += n {
		recs = append(recs, stream.Record{Kind: stream.KindRequest, ID: id, PID: s.PID, TS: 1000 * ms,
			Offset: uint32(off), Client: s.ClientCall, Data: []byte(s.Request[off:min(off+n, len(s.Request))])})
	}
	recs = append(recs, stream.Record{Kind: stream.KindResponse, ID: id, PID: s.PID, TS: st.HeadersTS,
		Flags: stream.RespHTTP, Total: s.HeadBytes, Data: []byte(s.Head)})
	if s.FirstBody != "" {
		recs = append(recs, stream.Record{Kind: stream.KindBody, ID: id, PID: s.PID, Flags: stream.BodyFirst,
			Offset: s.FirstBodyOffset, Data: []byte(s.FirstBody)})
	}
	for _, t := range s.Tails {
		recs = append(recs, stream.Record{Kind: stream.KindBody, ID: id, PID: s.PID, Flags: stream.BodyTail,
			Data: []byte(t)})
	}
	return append(recs, stream.Record{Kind: stream.KindEnd, ID: id, Reason: stream.EndTerminator, Stats: st})
}

// FirstOf is what a BODY record with BodyFirst carries of a write: its
// first stream.PeekMax bytes.
func FirstOf(write string) string { return write[:min(len(write), stream.PeekMax)] }

// TailOf is what a BODY record with BodyTail carries of a write: its last
// stream.PeekMax bytes.
func TailOf(write string) string { return write[max(0, len(write)-stream.PeekMax):] }

// ClientHello returns the first write of a crypto/tls client that asks
// for serverName: the record a client connection's KindTLSHello carries.
func ClientHello(serverName string) ([]byte, error) {
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		defer c.Close()
		cfg := &tls.Config{ServerName: serverName, InsecureSkipVerify: true} //nolint:gosec // nothing answers: only its hello is wanted
		_ = tls.Client(c, cfg).Handshake()
	}()
	if err := s.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<14)
	n, err := s.Read(buf)
	return buf[:n], err
}
