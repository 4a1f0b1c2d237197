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
