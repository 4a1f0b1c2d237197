package stream

import (
	"fmt"
	"net/netip"
	"unsafe"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/probe"
)

// Kind is a record's kind.
type Kind uint8

// Record kinds, as in tokenwire's stream.h.
const (
	KindRequest  = Kind(bpf.StreamTwStreamRecordTW_REC_REQUEST)
	KindResponse = Kind(bpf.StreamTwStreamRecordTW_REC_RESPONSE)
	KindProgress = Kind(bpf.StreamTwStreamRecordTW_REC_PROGRESS)
	KindEnd      = Kind(bpf.StreamTwStreamRecordTW_REC_END)
	KindChunk    = Kind(bpf.StreamTwStreamRecordTW_REC_CHUNK)
	KindBody     = Kind(bpf.StreamTwStreamRecordTW_REC_BODY)
	// KindTLSProc: a process read a TLS ClientHello on a watched port and
	// user space has not said how to read its TLS (PID, Comm). Read
	// hands these to the TLS manager and does not return them.
	KindTLSProc = Kind(bpf.StreamTwStreamRecordTW_REC_TLS_PROC)
	// KindTLSHello: the ClientHello a client connection began with (Data:
	// its first bytes; ID: the connection, Seq its first call's), whose
	// server name is the server.address of the calls whose request is not
	// read.
	KindTLSHello = Kind(bpf.StreamTwStreamRecordTW_REC_TLS_HELLO)
)

// String names the kind as the tests' and logs' messages print it.
func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	case KindProgress:
		return "progress"
	case KindEnd:
		return "end"
	case KindChunk:
		return "chunk"
	case KindBody:
		return "body"
	case KindTLSProc:
		return "tls_proc"
	case KindTLSHello:
		return "tls_hello"
	}
	return "unknown"
}

// EndReason says why a stream ended.
type EndReason uint8

// End reasons.
const (
	EndTerminator   = EndReason(bpf.StreamTwEndReasonTW_END_TERMINATOR)
	EndNextRequest  = EndReason(bpf.StreamTwEndReasonTW_END_NEXT_REQUEST)
	EndClose        = EndReason(bpf.StreamTwEndReasonTW_END_CLOSE)
	EndClientClosed = EndReason(bpf.StreamTwEndReasonTW_END_CLIENT_CLOSED)
	EndReset        = EndReason(bpf.StreamTwEndReasonTW_END_RESET)
	EndIdle         = EndReason(bpf.StreamTwEndReasonTW_END_IDLE)
	EndNoResponse   = EndReason(bpf.StreamTwEndReasonTW_END_NO_RESPONSE)
)

func (r EndReason) String() string {
	switch r {
	case EndTerminator:
		return "terminator"
	case EndNextRequest:
		return "next_request"
	case EndClose:
		return "close"
	case EndClientClosed:
		return "client_closed"
	case EndReset:
		return "reset"
	case EndIdle:
		return "idle_timeout"
	case EndNoResponse:
		return "no_response"
	}
	return "unknown"
}

// Flags of a Response record: its first write starts with "HTTP/1.", and
// its head says the body is chunked.
const (
	RespHTTP    = uint8(bpf.StreamTwResponseFlagTW_RESP_HTTP)
	RespChunked = uint8(bpf.StreamTwResponseFlagTW_RESP_CHUNKED)
)

// Flags of a Body record: the start of the first body write, or the end
// of a write whose last bytes look like an event that ends a stream.
const (
	BodyFirst = uint8(bpf.StreamTwBodyFlagTW_BODY_FIRST)
	BodyTail  = uint8(bpf.StreamTwBodyFlagTW_BODY_TAIL)
)

// ID identifies a stream: its socket, the generation of the socket's
// state (a later connection at the same socket address has another) and
// the request's number on the connection.
type ID struct {
	Sock uint64
	Gen  uint64
	Seq  uint32
}

// Record is one decoded record. Which fields are set depends on Kind;
// Data aliases the raw record and is valid until the next Read.
type Record struct {
	Kind Kind
	ID   ID

	// Request and Response.
	TS     uint64 // kernel monotonic ns
	Offset uint32 // Request: offset in the request; a first Body record: offset in the write
	Total  uint32 // Request: bytes read; Response: bytes of the first write
	PID    uint32
	Comm   [16]byte
	Flags  uint8 // Response: RespHTTP, RespChunked; Body: BodyFirst, BodyTail
	// Client: the record is about a client connection's call (its
	// request written, its response read).
	Client bool
	// Port, on payload records (Request, Response, Body, TLSHello), is the
	// stream's server port: the socket's own, or its peer's on a client's
	// stream. 0 on the others.
	Port uint16
	Data []byte

	// Progress, End and Chunk.
	Stats Stats
	// End only.
	Reason EndReason
}

// Stats is a stream's state as of a Progress, End or Chunk record. All
// times are kernel monotonic ns; zero means "not yet".
//
// In http mode the kernel does not count the response's first write (the
// head) as a chunk: it reports its size in HeadBytes, and FirstChunkTS is
// the first write after it. When the head also carried body bytes (a server
// that sends headers and the first event together), HeadBody folds them in.
type Stats struct {
	RequestTS    uint64
	HeadersTS    uint64
	FirstChunkTS uint64
	LastChunkTS  uint64
	EndTS        uint64
	Bytes        uint64 // body bytes (Chunk: this chunk's)
	GapSum       uint64 // ns, whole stream so far
	GapMax       uint64 // ns
	Chunks       uint32
	PID          uint32
	// GapCounts counts chunk intervals per bucket since the previous
	// Progress record of the stream.
	GapCounts [GapBuckets]uint32
	HeadBytes uint32
	// Flags say how the stream's bytes were read: StatsTLS, StatsTLSOpaque
	// or neither (plaintext from the socket's syscalls).
	Flags         uint32
	Local, Remote netip.AddrPort
}

// Flags of Stats.
const (
	// StatsTLS: a TLS stream read as plaintext through uprobes on the
	// TLS library: counts, heads and terminators as for plaintext, bytes
	// of plaintext.
	StatsTLS = uint32(bpf.StreamTwStatsFlagTW_STATS_TLS)
	// StatsTLSOpaque: a TLS stream timed from its record headers.
	StatsTLSOpaque = uint32(bpf.StreamTwStatsFlagTW_STATS_TLS_OPAQUE)
)

// TLS reports whether the stream was TLS read as plaintext.
func (s *Stats) TLS() bool { return s.Flags&StatsTLS != 0 }

// HeadBody returns how many body bytes the response's first write carried,
// given the header length found in the response head (0: not found, so
// the write is taken as headers only).
func (s *Stats) HeadBody(headerLen int) uint32 {
	if headerLen <= 0 || uint32(headerLen) >= s.HeadBytes {
		return 0
	}
	return s.HeadBytes - uint32(headerLen)
}

const (
	keySize     = int(unsafe.Sizeof(bpf.StreamStreamKey{}))
	payloadSize = int(unsafe.Sizeof(bpf.StreamStreamPayload{}))
	statsSize   = int(unsafe.Sizeof(bpf.StreamStreamStats{}))
)

// Decode turns a raw record into rec without allocating.
func Decode(raw []byte, rec *Record) error {
	if len(raw) < keySize {
		return fmt.Errorf("stream record of %d bytes", len(raw))
	}
	key := (*bpf.StreamStreamKey)(unsafe.Pointer(&raw[0]))
	rec.Kind = Kind(key.Kind)
	rec.ID = ID{Sock: key.Sock, Gen: key.Gen, Seq: key.Seq}
	switch rec.Kind {
	case KindRequest, KindResponse, KindBody, KindTLSProc, KindTLSHello:
		if len(raw) < payloadSize+int(key.Len) {
			return fmt.Errorf("stream payload record of %d bytes, want %d", len(raw), payloadSize+int(key.Len))
		}
		p := (*bpf.StreamStreamPayload)(unsafe.Pointer(&raw[0]))
		rec.TS, rec.Offset, rec.Total, rec.PID, rec.Flags = p.TsNs, p.Offset, p.Total, p.Pid, key.Reason
		rec.Client, rec.Port = p.Client != 0, p.Port
		for i, c := range p.Comm {
			rec.Comm[i] = byte(c)
		}
		rec.Data = raw[payloadSize : payloadSize+int(key.Len)]
	case KindProgress, KindEnd, KindChunk:
		if len(raw) < statsSize {
			return fmt.Errorf("stream stats record of %d bytes, want %d", len(raw), statsSize)
		}
		s := (*bpf.StreamStreamStats)(unsafe.Pointer(&raw[0]))
		rec.Reason = EndReason(key.Reason)
		rec.Data, rec.Port = nil, 0
		rec.Stats = Stats{
			RequestTS: s.ReqTs, HeadersTS: s.HeadersTs, FirstChunkTS: s.FirstChunkTs,
			LastChunkTS: s.LastChunkTs, EndTS: s.EndTs, Bytes: s.Bytes,
			GapSum: s.GapSumNs, GapMax: s.GapMaxNs, Chunks: s.Chunks, PID: s.Pid,
			GapCounts: s.GapCounts, HeadBytes: s.HeadBytes, Flags: s.Flags,
		}
		rec.Stats.Local, rec.Stats.Remote = probe.Endpoints(s.Ep.Family, &s.Ep.Saddr, &s.Ep.Daddr, s.Ep.Sport, s.Ep.Dport)
	default:
		return fmt.Errorf("unknown stream record kind %d", rec.Kind)
	}
	return nil
}
