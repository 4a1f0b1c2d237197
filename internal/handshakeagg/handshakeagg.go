// Package handshakeagg turns the handshake probe's events into cumulative
// series: a duration histogram per role, server port and address family,
// and failure counts by reason, as plain Go values for the receiver to
// translate into OTLP.
package handshakeagg

import (
	"maps"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/tokenwire/tokenwire/internal/handshake"
	"github.com/tokenwire/tokenwire/internal/histogram"
)

// Bounds of the duration histogram, in seconds: loopback and LAN
// handshakes (tens of microseconds) up to SYN retransmissions (1 s, 3 s,
// 7 s with the default RTO).
var Bounds = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10,
}

// MaxSeries bounds the keys kept per series kind. Ports beyond it are
// folded into port 0, so a port scan cannot make the receiver's memory or
// the backend's cardinality grow without bound.
const MaxSeries = 4096

// Key is one attribute set of the duration histogram.
type Key struct {
	Role handshake.Role
	Port uint16
	IPv6 bool
}

// Failure reasons (error.type).
const (
	Refused     = "refused"
	Timeout     = "timeout"
	Reset       = "reset"
	Unreachable = "unreachable"
	Aborted     = "aborted"
	Other       = "_OTHER"
)

// FailureKey is one attribute set of the failure counts.
type FailureKey struct {
	Key
	Reason string
}

// LostChildWindow is how long a failed server handshake waits for a
// successful one on the same connection before it counts. When a
// connection's final ACK and its next segment reach two CPUs at once, the
// kernel builds the child socket twice and closes the one that lost the
// race (SYN_RECV -> CLOSE, reported by the inet_sock_set_state
// tracepoint) while the other becomes ESTABLISHED, microseconds apart in
// either order. That connection did not fail.
const LostChildWindow = 250 * time.Millisecond

// maxHeld bounds the failed server handshakes waiting out the window and
// the successful ones remembered for it; beyond it failures count at once.
const maxHeld = 4096

// conn names one connection by its endpoints.
type conn struct{ local, remote netip.AddrPort }

type heldFailure struct {
	key FailureKey
	at  time.Time
}

// Aggregator folds events into totals cumulative since it was made. It is
// safe for concurrent use.
type Aggregator struct {
	mu        sync.Mutex
	durations map[Key]*histogram.Histogram
	failures  map[FailureKey]int64
	// unmeasured counts server handshakes whose duration the kernel did
	// not keep (SYN cookies without timestamps).
	unmeasured int64
	// held are failed server handshakes within LostChildWindow of their
	// arrival; established the successful server handshakes as recent.
	held        map[conn]heldFailure
	established map[conn]time.Time
	forgotAt    time.Time
	now         func() time.Time
}

// New returns an empty aggregator.
func New() *Aggregator {
	return &Aggregator{
		durations: map[Key]*histogram.Histogram{}, failures: map[FailureKey]int64{},
		held: map[conn]heldFailure{}, established: map[conn]time.Time{}, now: time.Now,
	}
}

func keyOf(ev *handshake.Event) Key {
	addr := ev.Local.Addr()
	return Key{Role: ev.Role, Port: ev.ServerPort(), IPv6: addr.Is6() && !addr.Is4In6()}
}

// Add folds one event into the totals. It allocates only for a new key.
func (a *Aggregator) Add(ev *handshake.Event) {
	k := keyOf(ev)
	a.mu.Lock()
	defer a.mu.Unlock()
	if ev.Role == handshake.RoleServer && a.lostChild(ev, k) {
		return
	}
	if ev.Failed {
		a.countFailure(FailureKey{Key: k, Reason: Reason(ev.Errno)})
		return
	}
	if !ev.HasDuration {
		a.unmeasured++
		return
	}
	h, ok := a.durations[k]
	if !ok {
		if len(a.durations) >= MaxSeries {
			k.Port = 0
			h = a.durations[k]
		}
		if h == nil {
			h = histogram.New(len(Bounds))
			a.durations[k] = h
		}
	}
	h.Observe(Bounds, ev.Duration.Seconds())
}

// lostChild reports whether ev is, or settles, a failed server handshake
// of a connection that succeeded (see LostChildWindow). A failure is held
// until Snapshot finds it older than the window; a success cancels a held
// failure and is remembered for one arriving after it.
func (a *Aggregator) lostChild(ev *handshake.Event, k Key) bool {
	c := conn{ev.Local, ev.Remote}
	now := a.now()
	if !ev.Failed {
		delete(a.held, c)
		if len(a.established) >= maxHeld && now.Sub(a.forgotAt) >= LostChildWindow {
			a.forget(now) // at most once a window: a flood stays O(1) an event
		}
		if len(a.established) < maxHeld {
			a.established[c] = now
		}
		return false
	}
	if at, ok := a.established[c]; ok && now.Sub(at) < LostChildWindow {
		return true
	}
	if len(a.held) >= maxHeld {
		return false
	}
	a.held[c] = heldFailure{FailureKey{Key: k, Reason: Reason(ev.Errno)}, now}
	return true
}

// forget drops the successes older than the window.
func (a *Aggregator) forget(now time.Time) {
	a.forgotAt = now
	for c, at := range a.established {
		if now.Sub(at) >= LostChildWindow {
			delete(a.established, c)
		}
	}
}

// settle counts the held failures that have waited out the window, or all
// of them.
func (a *Aggregator) settle(all bool) {
	now := a.now()
	for c, h := range a.held {
		if all || now.Sub(h.at) >= LostChildWindow {
			a.countFailure(h.key)
			delete(a.held, c)
		}
	}
	a.forget(now)
}

func (a *Aggregator) countFailure(fk FailureKey) {
	if _, ok := a.failures[fk]; !ok && len(a.failures) >= MaxSeries {
		fk.Port = 0
	}
	a.failures[fk]++
}

// Settle counts every held failure now, for the last emission when no
// more events can come.
func (a *Aggregator) Settle() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(true)
}

// Snapshot is a copy of the totals.
type Snapshot struct {
	Durations map[Key]*histogram.Histogram
	Failures  map[FailureKey]int64
}

// Snapshot copies the totals, counting the held failures older than
// LostChildWindow first, so that the receiver can translate them
// while events keep arriving.
func (a *Aggregator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settle(false)
	s := Snapshot{Durations: make(map[Key]*histogram.Histogram, len(a.durations)), Failures: maps.Clone(a.failures)}
	for k, h := range a.durations {
		s.Durations[k] = h.Clone()
	}
	return s
}

// Reason maps the socket error of a failed handshake to its error.type.
func Reason(errno syscall.Errno) string {
	switch errno {
	case 0:
		return Aborted
	case syscall.ECONNREFUSED:
		return Refused
	case syscall.ETIMEDOUT:
		return Timeout
	case syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE:
		return Reset
	case syscall.EHOSTUNREACH, syscall.ENETUNREACH:
		return Unreachable
	}
	return Other
}
