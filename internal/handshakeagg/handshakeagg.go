// Package handshakeagg turns the handshake probe's events into cumulative
// series: a duration histogram per role, server port and address family,
// and failure counts by reason, as plain Go values for the receiver to
// translate into OTLP.
package handshakeagg

import (
	"maps"
	"sync"
	"syscall"

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

// Aggregator folds events into totals cumulative since it was made. It is
// safe for concurrent use.
type Aggregator struct {
	mu        sync.Mutex
	durations map[Key]*histogram.Histogram
	failures  map[FailureKey]int64
	// unmeasured counts server handshakes whose duration the kernel did
	// not keep (SYN cookies without timestamps).
	unmeasured int64
}

// New returns an empty aggregator.
func New() *Aggregator {
	return &Aggregator{durations: map[Key]*histogram.Histogram{}, failures: map[FailureKey]int64{}}
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
	if ev.Failed {
		fk := FailureKey{Key: k, Reason: Reason(ev.Errno)}
		if _, ok := a.failures[fk]; !ok && len(a.failures) >= MaxSeries {
			fk.Port = 0
		}
		a.failures[fk]++
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

// Snapshot is a copy of the totals.
type Snapshot struct {
	Durations map[Key]*histogram.Histogram
	Failures  map[FailureKey]int64
}

// Snapshot copies the totals, so that the receiver can translate them
// while events keep arriving.
func (a *Aggregator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
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
