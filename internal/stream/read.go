package stream

// Read blocks until the next record and decodes it into rec. It returns
// ErrClosed after Close. Not safe for concurrent use; allocates nothing.
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
	// held counts the ids in each of 256 places (by a hash of the ID):
	// a record whose place holds none, nearly every one, is answered
	// without comparing it with the 64.
	held [256]uint8
}

// place is id's place in held.
func place(id ID) uint8 {
	h := id.Sock ^ id.Gen*0x9e3779b97f4a7c15 ^ uint64(id.Seq)*0xbf58476d1ce4e5b9
	return uint8(h ^ h>>29 ^ h>>47)
}

// drop reports whether rec belongs to a stream whose END was read
// lately: a second END, or any record but a request or a ClientHello
// (which begin streams) after it. An END read first is remembered.
func (r *recentEnds) drop(rec *Record) bool {
	if rec.Kind == KindRequest || rec.Kind == KindTLSHello || rec.ID == (ID{}) {
		return false
	}
	if r.has(rec.ID) {
		return true
	}
	if rec.Kind == KindEnd {
		r.add(rec.ID)
	}
	return false
}

func (r *recentEnds) has(id ID) bool {
	if r.held[place(id)] == 0 {
		return false
	}
	for _, seen := range r.ids {
		if seen == id {
			return true
		}
	}
	return false
}

func (r *recentEnds) add(id ID) {
	old := &r.ids[r.next]
	if *old != (ID{}) {
		r.held[place(*old)]--
	}
	*old = id
	r.held[place(id)]++
	r.next = (r.next + 1) % len(r.ids)
}
