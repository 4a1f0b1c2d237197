// Package stream loads and attaches tokenwire's stream probe and reads the
// records it writes: request and response heads, per-stream progress and
// the end of each streamed response.
//
// The kernel side (bpf/stream.bpf.c) keeps one small state machine per
// watched server socket; see its header comment for the model.
package stream

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/probe"
)

// GapBuckets is the number of chunk-interval histogram buckets the kernel
// keeps (len(Config.GapBounds)+1).
const GapBuckets = len(bpf.StreamStreamStats{}.GapCounts)

// DefaultGapBounds are the chunk-interval histogram's bounds: the semantic
// conventions' advice for gen_ai.server.time_per_output_token with three
// finer buckets below 10 ms (fast token streams). The kernel counts into
// them and the receiver exports them, so they are defined here once.
var DefaultGapBounds = []time.Duration{
	1 * time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond, 100 * time.Millisecond,
	150 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond,
	500 * time.Millisecond, 750 * time.Millisecond, time.Second, 2500 * time.Millisecond,
}

// PeekMax is how many bytes of a request segment or response head a
// record carries.
const PeekMax = len(bpf.StreamStreamPayload{}.Data)

// Config says what to watch and how big to make it.
type Config struct {
	// Ports are the server ports whose sockets are tracked.
	Ports []uint16
	// MaxSockets bounds the per-socket state map (LRU).
	MaxSockets uint32
	// RingBufferBytes is the ring buffer's size (power of two, >= page).
	RingBufferBytes uint32
	// HookOrder lists the hook types to try, in order.
	HookOrder []hook.Kind
	// Coalesce joins writes closer than this into one chunk.
	Coalesce time.Duration
	// FlushInterval is the longest a stream's chunk intervals wait in the
	// kernel before a PROGRESS record carries them out.
	FlushInterval time.Duration
	// ChunkRecords makes the kernel write one record per chunk (for
	// accuracy checks; off in production).
	ChunkRecords bool
	// GapBounds are the chunk-interval histogram's upper bounds, ascending
	// (GapBuckets-1 of them).
	GapBounds []time.Duration

	// stackRegs makes the programs find syscall registers on the task's
	// kernel stack even where bpf_task_pt_regs exists (tests: the way
	// kernels before 5.15 need).
	stackRegs bool
	// stateInMap keeps per-connection state in the map even where socket
	// storage works (tests: the way untyped hook types and 5.10 need).
	stateInMap bool
}

// Kind is a record's kind.
type Kind uint8

// Record kinds, as in tokenwire's stream.h.
const (
	KindRequest  = Kind(bpf.StreamTwStreamRecordTW_REC_REQUEST)
	KindResponse = Kind(bpf.StreamTwStreamRecordTW_REC_RESPONSE)
	KindProgress = Kind(bpf.StreamTwStreamRecordTW_REC_PROGRESS)
	KindEnd      = Kind(bpf.StreamTwStreamRecordTW_REC_END)
	KindChunk    = Kind(bpf.StreamTwStreamRecordTW_REC_CHUNK)
)

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

// RespHTTP flags a response whose first write starts with "HTTP/1.".
const RespHTTP = uint8(bpf.StreamTwResponseFlagTW_RESP_HTTP)

// ID identifies a stream: its socket, the generation of the socket's
// state (a later connection at the same socket address has another) and
// the request's number on the connection.
type ID struct {
	Sock uint64
	Gen  uint64
	Seq  uint32
}

// Record is one decoded record. Which fields are set depends on Kind;
// Data aliases the Record's own buffer and is valid until the next Read.
type Record struct {
	Kind Kind
	ID   ID

	// Request and Response.
	TS     uint64 // kernel monotonic ns
	Offset uint32 // Request: offset in the request
	Total  uint32 // Request: bytes read; Response: bytes of the first write
	PID    uint32
	Comm   [16]byte
	Flags  uint8 // Response: RespHTTP
	Data   []byte

	// Progress, End and Chunk.
	Stats Stats
	// End only.
	Reason EndReason

	buf [PeekMax]byte
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
	GapCounts     [GapBuckets]uint32
	HeadBytes     uint32
	Local, Remote netip.AddrPort
}

// HeadBody returns how many body bytes the response's first write carried,
// given the header length found in the response head (0: not found, so
// the write is taken as headers only).
func (s *Stats) HeadBody(headerLen int) uint32 {
	if headerLen <= 0 || uint32(headerLen) >= s.HeadBytes {
		return 0
	}
	return s.HeadBytes - uint32(headerLen)
}

// Counters are kernel-side counters summed over CPUs.
type Counters struct {
	// RecordsLost counts records the ring buffer had no room for.
	RecordsLost uint64
	// NewSockets counts connections that started being tracked, Closed
	// those of them that closed.
	NewSockets, Closed uint64
	// TrackFailed counts connections refused for want of room for their
	// state (the map's max_sockets; socket storage's allocation).
	TrackFailed uint64
	// Stale counts map entries of sockets whose close the probe did not
	// see, found and reset by a later connection at the same address.
	Stale uint64
}

// HookPoint is a kernel event the probe attaches to, and what attached.
type HookPoint struct {
	Name   string
	Choice hook.Choice
	// Optional hook points may fail to attach: streams then run without
	// what they give (payload peeks: every stream is opaque).
	Optional bool
}

// Tracer is a loaded and attached stream probe.
type Tracer struct {
	maps   bpf.StreamMaps
	points []HookPoint
	reader *ringbuf.Reader
	record ringbuf.Record
	ended  recentEnds
	// inSocket: the state is in socket storage; otherwise mapReason says
	// why not, when it was tried.
	inSocket  bool
	mapReason error

	detachOnce sync.Once
	detachErr  error
	closeOnce  sync.Once
	closeErr   error
}

// ErrClosed is returned by Read after Close.
var ErrClosed = errors.New("stream tracer closed")

// Open loads the stream probe and attaches each of its hook points with
// the first hook type the kernel accepts. On error nothing stays loaded.
func Open(cfg Config) (*Tracer, error) {
	t := &Tracer{}
	if err := t.open(cfg); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Tracer) open(cfg Config) error {
	if len(cfg.GapBounds) != GapBuckets-1 {
		return fmt.Errorf("need %d chunk-interval bounds, got %d", GapBuckets-1, len(cfg.GapBounds))
	}
	// Socket-local storage needs BTF-typed hooks: it is tried with the
	// typed types that lead the order, and the state goes to the map
	// when they do not attach everywhere.
	if typed := typedPrefix(cfg.HookOrder); len(typed) > 0 && !cfg.stateInMap {
		err := t.attach(cfg, true, typed)
		if err == nil {
			t.inSocket = true
			return t.openReader()
		}
		t.release()
		t.mapReason = err
	}
	if err := t.attach(cfg, false, cfg.HookOrder); err != nil {
		return err
	}
	return t.openReader()
}

// typedPrefix returns the BTF-typed hook types at the head of order.
func typedPrefix(order []hook.Kind) []hook.Kind {
	for i, k := range order {
		if k != hook.Fentry && k != hook.TPBTF {
			return order[:i]
		}
	}
	return order
}

// attach loads the maps and attaches every hook point, with the state in
// socket storage or in the map.
func (t *Tracer) attach(cfg Config, inSocket bool, order []hook.Kind) error {
	spec, err := bpf.LoadStream()
	if err != nil {
		return err
	}
	recvArgs, recvErr := recvmsgArgs()
	spec.Maps["tw_st_socks"].MaxEntries = cfg.MaxSockets
	if inSocket {
		spec.Maps["tw_st_socks"].MaxEntries = 1 // unused
	}
	spec.Maps["tw_st_events"].MaxEntries = cfg.RingBufferBytes
	var bounds [GapBuckets - 1]uint64
	for i, b := range cfg.GapBounds {
		bounds[i] = uint64(b)
	}
	// A short port list lives in .rodata (no lookup per event); a longer
	// one in the tw_st_ports array.
	var roPorts [maxROPorts]uint16
	inMap := len(cfg.Ports) > maxROPorts
	if !inMap {
		copy(roPorts[:], cfg.Ports)
	}
	for name, v := range map[string]any{
		"watch_ports":   roPorts,
		"n_watch_ports": uint8(min(len(cfg.Ports), maxROPorts)),
		"ports_in_map":  boolByte(inMap),
		"coalesce_ns":   uint64(cfg.Coalesce),
		"flush_ns":      uint64(cfg.FlushInterval),
		"chunk_records": boolByte(cfg.ChunkRecords),
		"gap_bounds_ns": bounds,
		"wakeup_bytes":  probe.WakeupBytes(cfg.RingBufferBytes),
		"regs_from_btf": boolByte(regsFromBTF() && !cfg.stackRegs),
		"state_in_sk":   boolByte(inSocket),
		// tcp_recvmsg's flags come after nonblock before Linux 5.19.
		"recvmsg_flags_arg5": boolByte(recvArgs == 6),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	if err := spec.LoadAndAssign(&t.maps, nil); err != nil {
		return fmt.Errorf("loading stream maps: %w", err)
	}
	for _, p := range cfg.Ports {
		if !inMap {
			break
		}
		if err := t.maps.TwStPorts.Put(uint32(p), uint8(1)); err != nil {
			return fmt.Errorf("setting watched port %d: %w", p, err)
		}
	}
	maps := map[string]*ebpf.Map{
		"tw_st_ports":    t.maps.TwStPorts,
		"tw_st_sk":       t.maps.TwStSk,
		"tw_st_socks":    t.maps.TwStSocks,
		"tw_st_events":   t.maps.TwStEvents,
		"tw_st_counters": t.maps.TwStCounters,
		"tw_st_calls":    t.maps.TwStCalls,
	}
	for _, p := range hookPoints(recvArgs, recvErr) {
		choice, err := probe.Choose(spec, maps, order, p.Variants)
		if err != nil && !p.Optional {
			return fmt.Errorf("attaching the stream probe to %s: %w", p.Name, err)
		}
		t.points = append(t.points, HookPoint{Name: p.Name, Choice: choice, Optional: p.Optional})
	}
	return nil
}

// release detaches every hook point and frees the maps of a failed attach.
func (t *Tracer) release() {
	for i := len(t.points) - 1; i >= 0; i-- {
		if c := t.points[i].Choice.Closer; c != nil {
			c.Close()
		}
	}
	t.points = nil
	t.maps.Close()
	t.maps = bpf.StreamMaps{}
}

func (t *Tracer) openReader() (err error) {
	if t.reader, err = ringbuf.NewReader(t.maps.TwStEvents); err != nil {
		return fmt.Errorf("opening the stream ring buffer: %w", err)
	}
	return nil
}

// StateStorage says where the kernel keeps per-connection state, for the
// startup log: socket-local storage, or the bounded map and why.
func (t *Tracer) StateStorage() string {
	if t.inSocket {
		return "socket storage"
	}
	if t.mapReason != nil {
		return "map (socket storage did not attach: " + t.mapReason.Error() + ")"
	}
	return "map (socket storage needs BTF-typed hooks first in hook_preference)"
}

// maxROPorts is how many ports the probe reads from .rodata (MAX_RO_PORTS
// in bpf/stream.bpf.c).
const maxROPorts = 16

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Programs returns the attached programs by hook point (two for a kprobe
// and its kretprobe), for measuring their cost (ebpf.Program.Stats).
func (t *Tracer) Programs() map[string][]*ebpf.Program {
	out := map[string][]*ebpf.Program{}
	for _, p := range t.points {
		if a, ok := p.Choice.Closer.(*probe.Attached); ok {
			out[p.Name] = a.Programs
		}
	}
	return out
}

// HookPoints reports what attached where.
func (t *Tracer) HookPoints() []HookPoint { return t.points }

// Read blocks until the next record and decodes it into rec. It returns
// ErrClosed after Close. Not safe for concurrent use; allocates nothing.
func (t *Tracer) Read(rec *Record) error {
	for {
		if err := probe.ReadRing(t.reader, &t.record); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, ringbuf.ErrFlushed) {
				return ErrClosed
			}
			return err
		}
		if err := Decode(t.record.RawSample, rec); err != nil {
			return err
		}
		if rec.Kind != KindEnd || t.ended.first(rec.ID) {
			return nil
		}
	}
}

// recentEnds remembers the streams whose END record was read last. The
// kernel's per-socket state has no lock, so where a write's accounting
// runs outside the socket lock (the sock_send_length tracepoint) the
// write that ends a stream and the peer's close can both end it, on two
// CPUs at once. Both records carry the same ID and come microseconds
// apart; the second is dropped here.
type recentEnds struct {
	ids  [64]ID
	next int
}

// first records id and reports whether it was not among the recent ends.
func (r *recentEnds) first(id ID) bool {
	for _, seen := range r.ids {
		if seen == id {
			return false
		}
	}
	r.ids[r.next] = id
	r.next = (r.next + 1) % len(r.ids)
	return true
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
	case KindRequest, KindResponse:
		if len(raw) < payloadSize {
			return fmt.Errorf("stream payload record of %d bytes, want %d", len(raw), payloadSize)
		}
		p := (*bpf.StreamStreamPayload)(unsafe.Pointer(&raw[0]))
		n := min(int(key.Len), PeekMax)
		rec.TS, rec.Offset, rec.Total, rec.PID, rec.Flags = p.TsNs, p.Offset, p.Total, p.Pid, key.Reason
		for i, c := range p.Comm {
			rec.Comm[i] = byte(c)
		}
		copy(rec.buf[:n], p.Data[:n])
		rec.Data = rec.buf[:n]
	case KindProgress, KindEnd, KindChunk:
		if len(raw) < statsSize {
			return fmt.Errorf("stream stats record of %d bytes, want %d", len(raw), statsSize)
		}
		s := (*bpf.StreamStreamStats)(unsafe.Pointer(&raw[0]))
		rec.Reason = EndReason(key.Reason)
		rec.Data = nil
		rec.Stats = Stats{
			RequestTS: s.ReqTs, HeadersTS: s.HeadersTs, FirstChunkTS: s.FirstChunkTs,
			LastChunkTS: s.LastChunkTs, EndTS: s.EndTs, Bytes: s.Bytes,
			GapSum: s.GapSumNs, GapMax: s.GapMaxNs, Chunks: s.Chunks, PID: s.Pid,
			GapCounts: s.GapCounts, HeadBytes: s.HeadBytes,
		}
		rec.Stats.Local, rec.Stats.Remote = probe.Endpoints(s.Ep.Family, &s.Ep.Saddr, &s.Ep.Daddr, s.Ep.Sport, s.Ep.Dport)
	default:
		return fmt.Errorf("unknown stream record kind %d", rec.Kind)
	}
	return nil
}

// Counters sums the kernel's per-CPU counters.
func (t *Tracer) Counters() (c Counters, err error) {
	for idx, dst := range map[bpf.StreamTwStreamCounter]*uint64{
		bpf.StreamTwStreamCounterTW_ST_COUNTER_RINGBUF_LOST: &c.RecordsLost,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_NEW_SOCKETS:  &c.NewSockets,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_CLOSED:       &c.Closed,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_TRACK_FAILED: &c.TrackFailed,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_STALE:        &c.Stale,
	} {
		if *dst, err = probe.SumPerCPU(t.maps.TwStCounters, uint32(idx)); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Expire ends the stream on sock that went quiet: it removes the socket's
// state from the kernel (a later request on it starts afresh) and fills rec
// as the END record would have been, with reason EndIdle and the last write
// as the end. It reports false when the kernel no longer tracks sock, and
// always when the state is in socket storage, which user space cannot
// reach by the socket's address. Addresses are not in the kernel's state:
// rec.Stats.Local and Remote are left zero.
func (t *Tracer) Expire(sock uint64, rec *Record) (bool, error) {
	if t.inSocket {
		return false, nil
	}
	var st bpf.StreamStreamState
	if err := t.maps.TwStSocks.Lookup(sock, &st); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return false, nil
		}
		return false, err
	}
	if err := t.maps.TwStSocks.Delete(sock); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return false, err
	}
	end := st.LastWriteTs
	if end == 0 {
		end = st.HeadersTs
	}
	*rec = Record{Kind: KindEnd, ID: ID{Sock: sock, Gen: st.Gen, Seq: st.Seq}, Reason: EndIdle}
	if st.State == uint8(bpf.StreamTwStreamStateTW_ST_REQUEST) {
		rec.Reason = EndNoResponse
	}
	rec.Stats = Stats{
		RequestTS: st.ReqTs, HeadersTS: st.HeadersTs, FirstChunkTS: st.FirstChunkTs,
		LastChunkTS: st.LastChunkTs, EndTS: end, Bytes: st.Bytes, GapSum: st.GapSumNs,
		GapMax: st.GapMaxNs, Chunks: st.Chunks, PID: st.Pid, GapCounts: st.GapCounts, HeadBytes: st.HeadBytes,
	}
	return true, nil
}

// Sockets counts tracked connections: the map's entries, or in socket
// storage those seen opening and not yet closing.
func (t *Tracer) Sockets() (int, error) {
	if !t.inSocket {
		return probe.CountEntries(t.maps.TwStSocks)
	}
	c, err := t.Counters()
	if err != nil || c.Closed > c.NewSockets {
		return 0, err
	}
	return int(c.NewSockets - c.Closed), nil
}

func (t *Tracer) detach() error {
	t.detachOnce.Do(func() {
		var errs []error
		for i := len(t.points) - 1; i >= 0; i-- {
			if c := t.points[i].Choice.Closer; c != nil {
				errs = append(errs, c.Close())
			}
		}
		t.detachErr = errors.Join(errs...)
	})
	return t.detachErr
}

// Stop detaches every hook point, so the kernel writes no more records,
// and lets Read return the records already in the ring buffer before it
// returns ErrClosed: streams that ended while the collector ran are all
// reported when it shuts down. Close is still needed to free the maps.
func (t *Tracer) Stop() error {
	err := t.detach()
	if t.reader != nil {
		err = errors.Join(err, t.reader.Flush())
	}
	return err
}

// Close detaches every hook point, stops a blocked Read and frees the maps.
// It may be called more than once and concurrently with Read.
func (t *Tracer) Close() error {
	t.closeOnce.Do(func() {
		errs := []error{t.detach()}
		if t.reader != nil {
			errs = append(errs, t.reader.Close())
		}
		errs = append(errs, t.maps.Close())
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}
