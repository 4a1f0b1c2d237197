package stream

import (
	"math/bits"
	"sync/atomic"
)

// Read blocks until the next record and decodes it into rec. It returns
// ErrClosed after Close. The records of a stream that come after its END
// (recentEnds) are dropped here, so a consumer sees none. Not safe for
// concurrent use; allocates nothing.
func (t *Tracer) Read(rec *Record) error {
	for {
		raw, err := t.Next()
		if err != nil {
			return err
		}
		if err := Decode(raw, rec); err != nil {
			return err
		}
		if rec.Kind == KindTLSProc {
			if t.tls.manager != nil {
				t.tls.manager.Discover(rec.PID)
			}
			continue
		}
		if !t.ended.drop(rec) {
			return nil
		}
	}
}

// recentEnds remembers the streams whose END record was read last. The
// kernel's per-socket state has no lock, so where a write's accounting
// runs outside the socket lock (the sock_send_length tracepoint) the
// write that ends a stream and the peer's close can both end it, on two
// CPUs at once, and a write's PROGRESS can follow the END of its stream.
// Those records carry the ended stream's ID and come microseconds after
// its END: they would open it again and count it twice, so they are
// dropped here. A new stream on the connection has a new ID.
type recentEnds struct {
	ids  [64]ID
	next int
	// slots[place(id)] has bit i set when ids[i] has that place: a
	// record is compared only with the ends of its place, which for
	// most records is none.
	slots [256]uint64
	// lateEnds and lateOthers count the dropped records: second ENDs,
	// and the other kinds.
	lateEnds, lateOthers atomic.Uint64
}

// place is id's place in slots.
func place(id ID) uint8 {
	h := (id.Sock ^ id.Gen<<1 ^ uint64(id.Seq)<<32) * 0x9e3779b97f4a7c15
	return uint8(h >> 56)
}

// drop reports whether rec belongs to a stream whose END was read
// lately: a second END, or any record but a request or a ClientHello
// (which begin streams) after it. An END read first is remembered.
func (r *recentEnds) drop(rec *Record) bool {
	if rec.Kind == KindRequest || rec.Kind == KindTLSHello || rec.ID == (ID{}) {
		return false
	}
	if r.has(rec.ID) {
		if rec.Kind == KindEnd {
			r.lateEnds.Add(1)
		} else {
			r.lateOthers.Add(1)
		}
		return true
	}
	if rec.Kind == KindEnd {
		r.add(rec.ID)
	}
	return false
}

func (r *recentEnds) has(id ID) bool {
	for m := r.slots[place(id)]; m != 0; m &= m - 1 {
		if r.ids[bits.TrailingZeros64(m)] == id {
			return true
		}
	}
	return false
}

func (r *recentEnds) add(id ID) {
	if old := r.ids[r.next]; old != (ID{}) {
		r.slots[place(old)] &^= 1 << r.next
	}
	r.ids[r.next] = id
	r.slots[place(id)] |= 1 << r.next
	r.next = (r.next + 1) % len(r.ids)
}

// LateRecords counts the records Read dropped because their stream's END
// came before them: second ENDs, and the other kinds (PROGRESS, body).
func (t *Tracer) LateRecords() (ends, others uint64) {
	return t.ended.lateEnds.Load(), t.ended.lateOthers.Load()
}
