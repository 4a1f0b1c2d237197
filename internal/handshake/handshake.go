// Package handshake loads and attaches tokenwire's TCP handshake probe and
// reads the handshakes it reports.
//
// One Tracer owns every kernel object it creates (maps, the program, its
// link and the ring-buffer reader); Close releases all of them.
package handshake

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/probe"
)

// Config says what to load and how big to make it.
type Config struct {
	// Ports, when not empty, limits tracking to handshakes whose server
	// port is in the list (the remote port for the client role, the local
	// port for the server role).
	Ports []uint16
	// MaxTrackedSockets bounds the map of client sockets in SYN_SENT.
	MaxTrackedSockets uint32
	// RingBufferBytes is the size of the ring buffer: a power of two and a
	// multiple of the page size.
	RingBufferBytes uint32
	// HookOrder lists the hook types to try, in order.
	HookOrder []hook.Kind
}

// Role is the local socket's side of the handshake.
type Role uint8

// Roles.
const (
	RoleClient = Role(bpf.RoleClient)
	RoleServer = Role(bpf.RoleServer)
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleServer:
		return "server"
	}
	return "unknown"
}

// Event is one handshake as the kernel saw it.
type Event struct {
	Role Role
	// Duration is the handshake's length; valid when HasDuration.
	Duration    time.Duration
	HasDuration bool
	// Failed is set when the handshake did not complete; Errno is the
	// socket error then (0: the application closed the socket first).
	Failed bool
	Errno  syscall.Errno
	// Local and Remote are the socket's own and its peer's endpoint.
	Local, Remote netip.AddrPort
	// PID is the process that called connect() (client role only).
	PID uint32
	// Retransmits counts SYN (client) or SYN-ACK (server) retransmissions.
	Retransmits uint32
	// SynackRetransmitted marks a server duration measured in milliseconds
	// from the first SYN-ACK because the SYN-ACK was sent again.
	SynackRetransmitted bool
}

// ServerPort is the well-known side of the connection.
func (e *Event) ServerPort() uint16 {
	if e.Role == RoleClient {
		return e.Remote.Port()
	}
	return e.Local.Port()
}

// Counters are the kernel-side counters, summed over CPUs.
type Counters struct {
	// RecordsLost counts events dropped because the ring buffer was full.
	RecordsLost uint64
	// Untracked counts client handshakes whose start was not seen (the
	// socket connected before the probe attached, or LRU eviction).
	Untracked uint64
}

// Tracer is a loaded and attached handshake probe.
type Tracer struct {
	probe.Tracer
	maps   bpf.HandshakeMaps
	choice hook.Choice
}

const tracepointGroup, tracepointName, kernelFunc = "sock", "inet_sock_set_state", "tcp_set_state"

// Open loads the maps, attaches the first hook type in cfg.HookOrder that
// the kernel accepts and opens the ring buffer. On error nothing stays
// loaded.
func Open(cfg Config) (*Tracer, error) {
	t := &Tracer{}
	if err := t.open(cfg); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Tracer) open(cfg Config) (err error) {
	spec, err := bpf.LoadHandshake()
	if err != nil {
		return err
	}
	spec.Maps["tw_hs_syn_sent"].MaxEntries = cfg.MaxTrackedSockets
	spec.Maps["tw_hs_events"].MaxEntries = cfg.RingBufferBytes
	if len(cfg.Ports) > 0 {
		if err := spec.Variables["filter_ports"].Set(uint8(1)); err != nil {
			return err
		}
	}
	if err := spec.Variables["wakeup_bytes"].Set(probe.WakeupBytes(cfg.RingBufferBytes)); err != nil {
		return err
	}
	if err := t.LoadMaps(spec, &t.maps, "handshake"); err != nil {
		return err
	}
	if err := probe.WatchPorts(t.maps.TwHsPorts, cfg.Ports); err != nil {
		return err
	}

	maps := map[string]*ebpf.Map{
		"tw_hs_ports":    t.maps.TwHsPorts,
		"tw_hs_syn_sent": t.maps.TwHsSynSent,
		"tw_hs_events":   t.maps.TwHsEvents,
		"tw_hs_counters": t.maps.TwHsCounters,
	}
	t.choice, err = probe.Choose(spec, maps, cfg.HookOrder, Variants())
	if err != nil {
		return fmt.Errorf("attaching the handshake probe: %w", err)
	}
	t.Attached(t.choice.Closer)
	if err := t.OpenRing(t.maps.TwHsEvents); err != nil {
		return fmt.Errorf("opening the handshake ring buffer: %w", err)
	}
	return nil
}

// HookPoint names the kernel event the handshake probe attaches to.
const HookPoint = tracepointName

// Variants lists the handshake probe's programs, one per hook type.
func Variants() []probe.Variant {
	return append([]probe.Variant{
		probe.One(hook.Fentry, "tw_hs_fentry", probe.Tracing()),
		probe.One(hook.Kprobe, "tw_hs_kprobe", probe.Kprobe(kernelFunc)),
	}, probe.Tracepoints("tw_hs", tracepointGroup, tracepointName)...)
}

// Hook reports the chosen hook type and the ones refused before it.
func (t *Tracer) Hook() hook.Choice { return t.choice }

// Read blocks until the next handshake and decodes it into ev. It returns
// ErrClosed once Close has been called. Read is not safe for concurrent use
// and allocates nothing.
func (t *Tracer) Read(ev *Event) error {
	raw, err := t.Next()
	if err != nil {
		return err
	}
	return Decode(raw, ev)
}

// ErrClosed is returned by Read after Close.
var ErrClosed = probe.ErrClosed

// recordSize is the size of struct handshake_event.
const recordSize = int(unsafe.Sizeof(bpf.HandshakeEvent{}))

// Decode turns a raw ring-buffer record into ev without allocating.
func Decode(raw []byte, ev *Event) error {
	if len(raw) < recordSize {
		return fmt.Errorf("handshake record of %d bytes, want %d", len(raw), recordSize)
	}
	r := (*bpf.HandshakeEvent)(unsafe.Pointer(&raw[0]))
	*ev = Event{
		Role:        Role(r.Role),
		PID:         r.Pid,
		Errno:       syscall.Errno(r.Errno),
		Retransmits: r.Retransmits,
	}
	ev.Failed = r.Flags&bpf.HandshakeFailed != 0
	ev.SynackRetransmitted = r.Flags&bpf.HandshakeSynackRetransmitted != 0
	ev.HasDuration = !ev.Failed && r.Flags&bpf.HandshakeNoDuration == 0
	if ev.HasDuration {
		ev.Duration = time.Duration(r.DurationNs)
	}
	ev.Local, ev.Remote = probe.Endpoints(r.Ep.Family, &r.Ep.Saddr, &r.Ep.Daddr, r.Ep.Sport, r.Ep.Dport)
	return nil
}

// Counters sums the kernel's per-CPU counters.
func (t *Tracer) Counters() (c Counters, err error) {
	if c.RecordsLost, err = probe.SumPerCPU(t.maps.TwHsCounters, uint32(bpf.CounterRingbufLost)); err != nil {
		return c, err
	}
	c.Untracked, err = probe.SumPerCPU(t.maps.TwHsCounters, uint32(bpf.CounterHandshakeUntracked))
	return c, err
}

// TrackedSockets counts client sockets whose handshake is in flight.
func (t *Tracer) TrackedSockets() (int, error) {
	return probe.CountEntries(t.maps.TwHsSynSent)
}
