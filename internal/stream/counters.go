package stream

import (
	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/probe"
)

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
	// TLS counts connections that began with a TLS ClientHello; TLSPlain
	// those of them read as plaintext (a server's whose process was probed
	// as it began, a client's once a call of it was read), TLSNoRoom
	// those that could not be for want of room in the state map.
	TLS, TLSPlain, TLSNoRoom uint64
	// Unread counts request and response heads and body records not sent
	// to user space because the application's buffer was not in memory
	// when the probe read it (a page being migrated or collapsed into a
	// huge page), or the kernel's copy of a write could not be read: the
	// stream is measured, its request or response details are missing.
	Unread uint64
	// TailFromUser counts body writes whose last bytes were read from the
	// writer's memory where the kernel's copy is the programs' way
	// (TailSource): the copy was not there to read (a socket with zerocopy
	// or an upper layer such as kTLS, or in a sockmap, a send call other
	// than write, writev, sendto or sendmsg, a fragment with fewer than 16
	// bytes of the write, or fewer than 512 of a write whose end looks
	// like the stream's: the write began on the fragment's previous page).
	TailFromUser uint64
	// Shed counts request and body records not sent because the ring
	// buffer was three quarters full: its last quarter is kept for the
	// records that time and end streams, and for response heads.
	Shed uint64
}

// Counters sums the kernel's per-CPU counters.
func (t *Tracer) Counters() (c Counters, err error) {
	for idx, dst := range map[bpf.StreamTwStreamCounter]*uint64{
		bpf.StreamTwStreamCounterTW_ST_COUNTER_RINGBUF_LOST:   &c.RecordsLost,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_NEW_SOCKETS:    &c.NewSockets,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_CLOSED:         &c.Closed,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_TRACK_FAILED:   &c.TrackFailed,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_STALE:          &c.Stale,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_TLS:            &c.TLS,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_TLS_PLAIN:      &c.TLSPlain,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_TLS_NO_ROOM:    &c.TLSNoRoom,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_UNREAD:         &c.Unread,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_TAIL_FROM_USER: &c.TailFromUser,
		bpf.StreamTwStreamCounterTW_ST_COUNTER_SHED:           &c.Shed,
	} {
		if *dst, err = probe.SumPerCPU(t.maps.TwStCounters, uint32(idx)); err != nil {
			return c, err
		}
	}
	return c, nil
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
