// Package stream loads and attaches tokenwire's stream probe and reads the
// records it writes: request and response heads, per-stream progress and
// the end of each streamed response.
//
// The kernel side (bpf/stream.bpf.c) keeps one small state machine per
// watched server socket; see its header comment for the model.
package stream

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"

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

// PeekMax is how many bytes of a body write a record carries at most, and
// how many of a response's head the kernel looks for "chunked" in
// (TW_PEEK_MAX in bpf/tokenwire.h).
const PeekMax = 512

// HeadMax is how many bytes of a response's first write (its head, and
// any body bytes that went with it) a record carries at most (TW_HEAD_MAX
// in bpf/tokenwire.h): hosted LLM APIs, and the gateways that relay their
// headers, send heads of 1 to 1.5 KiB.
const HeadMax = 2048

// RequestSlice is how many bytes of a request a record carries at most.
const RequestSlice = len(bpf.StreamPayloadBuf{}.Data)

// Config says what to watch and how big to make it.
type Config struct {
	// Ports are the server ports whose sockets are tracked.
	Ports []uint16
	// MaxSockets bounds the per-socket state map (LRU).
	MaxSockets uint32
	// StateSlots is how many connections can keep their state in a slot
	// of tw_st_slots at once, where the state is in socket storage and
	// the kernel has BPF atomics: a power of two (DefaultStateSlots), or
	// 0 for socket storage alone. With any slots, FrontSlots more come
	// first (tw_st_front). Connections beyond them, and those whose slots
	// others hold, keep it in socket storage.
	StateSlots uint32
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

	// RequestCaptureBytes is how much of each request (head and body) is
	// sent to user space; 0 sends the first 1 KiB.
	RequestCaptureBytes uint32
	// NoResponseBodies keeps the response's body in the kernel: no BODY
	// records, and a head record holds no buffer but the head's (body
	// bytes a server writes in that buffer go with it: Go's net/http's
	// first event, or Node's over TLS, where each write is one SSL_write),
	// so no GenAI details from the response.
	NoResponseBodies bool

	// TLS says whether TLS servers' plaintext is read through uprobes.
	TLS TLSConfig

	// Clients selects the client connections (outbound calls) that are
	// measured too; none when it lists no remote port.
	Clients ClientConfig

	// stackRegs makes the programs find syscall registers on the task's
	// kernel stack even where bpf_task_pt_regs exists (tests: the way
	// kernels before 5.15 need).
	stackRegs bool
	// regsByHelper makes the programs ask bpf_task_pt_regs for syscall
	// registers even where they can reach them with loads alone (tests:
	// the way kernels 5.15 to 6.1 need).
	regsByHelper bool
	// tailByUser makes the programs read every write's last bytes from
	// the writer's memory even where they can find them in the kernel's
	// copy (tests: the way kernels before 6.2 need).
	tailByUser bool
	// stateInMap keeps per-connection state in the map even where socket
	// storage works (tests: the way untyped hook types and 5.10 need).
	stateInMap bool
	// tlsPerfLinks attaches the TLS uprobes with one perf-event link each
	// even where uprobe_multi links work (tests: the way kernels before
	// 6.6 need).
	tlsPerfLinks bool
	// portsInMap keeps even a short port list in tw_st_ports, where it
	// can change while the probe is loaded (tests: one probe serves the
	// servers of many tests).
	portsInMap bool
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
	probe.Tracer
	maps   bpf.StreamMaps
	points []HookPoint
	ended  recentEnds
	// inSocket: the state is in socket storage; otherwise mapReason says
	// why not, when it was tried.
	inSocket  bool
	mapReason error
	// inSlots: with inSocket, most connections' state is in slots
	// (tw_st_front, tw_st_slots).
	inSlots bool
	// tailReason says why the programs read write tails from the
	// writer's memory; nil when they read the kernel's copy.
	tailReason error
	// What the TLS uprobes load with: the collection as configured, and
	// the maps they share with the socket hooks.
	spec    *ebpf.CollectionSpec
	mapRepl map[string]*ebpf.Map
	tls     tlsState
}

// ErrClosed is returned by Read after Close.
var ErrClosed = probe.ErrClosed

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
	if err := CheckStateSlots(int64(cfg.StateSlots)); err != nil {
		return fmt.Errorf("state slots: %w", err)
	}
	// Socket-local storage needs BTF-typed hooks: it is tried with the
	// typed types that lead the order, and the state goes to the map
	// when they do not attach everywhere.
	attached := false
	if typed := typedPrefix(cfg.HookOrder); len(typed) > 0 && !cfg.stateInMap {
		err := t.attach(cfg, true, typed)
		if err == nil {
			t.inSocket, t.inSlots, attached = true, useSlots(cfg), true
		} else {
			t.release()
			t.mapReason = err
		}
	}
	if !attached {
		if err := t.attach(cfg, false, cfg.HookOrder); err != nil {
			return err
		}
	}
	// Only a BTF-typed write hook hands the programs the socket whose page
	// fragment holds the kernel's copy (body_flags' sent).
	if k := t.sentKind(); t.tailReason == nil && k != hook.Fentry && k != hook.TPBTF {
		t.tailReason = fmt.Errorf("the kernel's copy needs the fentry or tp_btf write hook, not %s", k)
	}
	if err := t.openReader(); err != nil {
		return err
	}
	if cfg.TLS.Enabled {
		t.startTLS(cfg, t.spec, t.mapRepl)
	}
	return nil
}

// DefaultStateSlots is Config.StateSlots' usual value: 8192 slots of 256
// bytes, 2 MiB in all.
const DefaultStateSlots = 8192

// FrontSlots is how many slots tw_st_front has when the slots are used: a
// connection tries its slot there before its slot in tw_st_slots. 16 KiB,
// so that the kernel can kmalloc them, in its direct map
// (bpf/stream_state.h says why that is cheaper to reach): FRONT_SLOTS
// there.
const FrontSlots = 64

// MaxStateSlots bounds Config.StateSlots: 256 MiB of slots.
const MaxStateSlots = 1 << 20

// CheckStateSlots says whether n slots is a count Config.StateSlots can
// take: 0, or a power of two up to MaxStateSlots (the probe masks a
// socket's hash by n-1).
func CheckStateSlots(n int64) error {
	if n < 0 || n > MaxStateSlots || n&(n-1) != 0 {
		return fmt.Errorf("must be 0 or a power of two up to %d, got %d", MaxStateSlots, n)
	}
	return nil
}

// useSlots says whether connections keep their state in slots
// (tw_st_front, tw_st_slots; with socket storage): they claim a slot with
// an atomic compare-and-exchange.
func useSlots(cfg Config) bool {
	return cfg.StateSlots > 0 && probe.HaveAtomics()
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
	if !probe.HaveAtomics() {
		probe.StripCmpXchg(spec) // the slots' claim, off here (useSlots)
	}
	recvArgs, recvErr := recvmsgArgs()
	spec.Maps["tw_st_socks"].MaxEntries = cfg.MaxSockets
	if inSocket && !cfg.TLS.Enabled {
		// Only TLS connections read through uprobes move their state
		// there from socket storage.
		spec.Maps["tw_st_socks"].MaxEntries = 1
	}
	slots := inSocket && useSlots(cfg)
	nSlots := uint32(1)
	if slots {
		nSlots = cfg.StateSlots
	}
	spec.Maps["tw_st_slots"].MaxEntries = nSlots
	if !slots {
		spec.Maps["tw_st_front"].MaxEntries = 1
	}
	spec.Maps["tw_st_events"].MaxEntries = cfg.RingBufferBytes
	fragBase := t.tailSource(cfg)
	var bounds [GapBuckets - 1]uint64
	for i, b := range cfg.GapBounds {
		bounds[i] = uint64(b)
	}
	// A short port list lives in .rodata (no lookup per event); a longer
	// one in the tw_st_ports array.
	var roPorts [maxROPorts]uint16
	inMap := len(cfg.Ports) > maxROPorts || cfg.portsInMap
	if !inMap {
		copy(roPorts[:], cfg.Ports)
	}
	for name, v := range map[string]any{
		"watch_ports":         roPorts,
		"n_watch_ports":       uint8(min(len(cfg.Ports), maxROPorts)),
		"ports_in_map":        boolByte(inMap),
		"coalesce_ns":         uint64(cfg.Coalesce),
		"flush_ns":            uint64(cfg.FlushInterval),
		"chunk_records":       boolByte(cfg.ChunkRecords),
		"gap_bounds_ns":       bounds,
		"wakeup_bytes":        probe.WakeupBytes(cfg.RingBufferBytes),
		"payload_room":        payloadRoom(cfg.RingBufferBytes),
		"regs_from_btf":       boolByte(regsFromBTF() && !cfg.stackRegs),
		"regs_by_cast":        boolByte(RegsByCast() && !cfg.stackRegs && !cfg.regsByHelper),
		"frag_va_base":        fragBase,
		"state_in_sk":         boolByte(inSocket),
		"state_slots":         boolByte(slots),
		"state_slot_mask":     nSlots - 1,
		"request_capture_max": cmp.Or(cfg.RequestCaptureBytes, 1024),
		"response_details":    boolByte(!cfg.NoResponseBodies),
		"tls_uprobes":         boolByte(cfg.TLS.Enabled),
		// tcp_recvmsg's flags come after nonblock before Linux 5.19.
		"recvmsg_flags_arg5": boolByte(recvArgs == 6),
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	clientVars, err := cfg.Clients.clientVars()
	if err != nil {
		return err
	}
	for name, v := range clientVars {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("setting %s: %w", name, err)
		}
	}
	if err := t.LoadMaps(spec, &t.maps, "stream"); err != nil {
		return err
	}
	if inMap {
		if err := probe.WatchPorts(t.maps.TwStPorts, cfg.Ports); err != nil {
			return err
		}
	}
	maps := map[string]*ebpf.Map{
		"tw_st_ports":    t.maps.TwStPorts,
		"tw_st_sk":       t.maps.TwStSk,
		"tw_st_socks":    t.maps.TwStSocks,
		"tw_st_slots":    t.maps.TwStSlots,
		"tw_st_front":    t.maps.TwStFront,
		"tw_st_events":   t.maps.TwStEvents,
		"tw_st_counters": t.maps.TwStCounters,
		"tw_st_calls":    t.maps.TwStCalls,
		// Shared by the socket hooks and the TLS uprobes.
		"tw_st_tls_procs": t.maps.TwStTlsProcs,
		"tw_st_tls_calls": t.maps.TwStTlsCalls,
		"tw_st_tls_conns": t.maps.TwStTlsConns,
		"tw_st_tls_pend":  t.maps.TwStTlsPend,
	}
	t.spec, t.mapRepl = spec, maps
	for _, p := range hookPoints(recvArgs, recvErr) {
		choice, err := probe.Choose(spec, maps, order, p.Variants)
		if err != nil && !p.Optional {
			return fmt.Errorf("attaching the stream probe to %s: %w", p.Name, err)
		}
		t.points = append(t.points, HookPoint{Name: p.Name, Choice: choice, Optional: p.Optional})
		t.Attached(choice.Closer)
	}
	return nil
}

// release detaches every hook point and frees the maps of a failed attach.
func (t *Tracer) release() {
	t.Release()
	t.points = nil
	t.maps = bpf.StreamMaps{}
	t.spec, t.mapRepl = nil, nil
}

func (t *Tracer) openReader() error {
	if err := t.OpenRing(t.maps.TwStEvents); err != nil {
		return fmt.Errorf("opening the stream ring buffer: %w", err)
	}
	return nil
}

// StateStorage says where the kernel keeps per-connection state, for the
// startup log: socket-local storage, or the bounded map and why.
func (t *Tracer) StateStorage() string {
	if t.inSlots {
		return "socket storage, behind slots"
	}
	if t.inSocket {
		return "socket storage"
	}
	if t.mapReason != nil {
		return "map (socket storage did not attach: " + t.mapReason.Error() + ")"
	}
	return "map (socket storage needs BTF-typed hooks first in hook_preference)"
}

// tailSource returns frag_va_base for the programs (0: they read every
// write's last bytes from the writer's memory) and keeps why, for
// TailSource.
func (t *Tracer) tailSource(cfg Config) uint64 {
	base, err := DirectMapBase()
	switch {
	case cfg.tailByUser:
		base, t.tailReason = 0, errors.New("turned off")
	case err != nil:
		base, t.tailReason = 0, err
	}
	return base
}

// TailSource says where the programs read a body write's last bytes (the
// terminators, the last event), for the startup log: the kernel's copy of
// them, or the writer's memory and why.
func (t *Tracer) TailSource() string {
	if t.tailReason == nil {
		return "the kernel's copy"
	}
	return "the writer's memory (" + t.tailReason.Error() + ")"
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

// Stop detaches the TLS uprobes and every hook point, and lets Read
// return the records already written (probe.Tracer.Stop).
func (t *Tracer) Stop() error {
	return errors.Join(t.stopTLS(), t.Tracer.Stop())
}

// Close detaches the TLS uprobes and every hook point and frees the maps.
// It may be called more than once and concurrently with Read.
func (t *Tracer) Close() error {
	return errors.Join(t.stopTLS(), t.Tracer.Close())
}

// HookPoints reports what attached where.
func (t *Tracer) HookPoints() []HookPoint { return t.points }

// sentKind is the hook type that attached for writes.
func (t *Tracer) sentKind() hook.Kind {
	for _, p := range t.points {
		if p.Name == PointSent {
			return p.Choice.Kind
		}
	}
	return ""
}

// payloadRoom is how many bytes may wait in a ring of size bytes for a
// request or body record to go in: three quarters of it. The last quarter
// is kept for the PROGRESS and END records that time and end streams, and
// for response heads (which say whether a response is a stream), so that
// a flood of requests sheds their bytes (Counters.Shed) and keeps their
// measurements.
func payloadRoom(size uint32) uint64 {
	return uint64(size) - uint64(size)/4
}
