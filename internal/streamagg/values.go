package streamagg

import "time"

// values interns the distinct values of one attribute (routes, models,
// error types) up to a cap. A value not seen for the expiry gives its
// place to a new one, so that a burst of junk cannot hold the places for
// good; values beyond the cap are reported as other (OtherValue unless
// set).
type values struct {
	limit  int
	expiry time.Duration
	other  string
	slots  map[string]*valueSlot
}

type valueSlot struct {
	s    string
	last time.Duration // when it was last seen, since Aggregator.base
}

func newValues(limit int, expiry time.Duration) *values {
	return &values{limit: limit, expiry: expiry, other: OtherValue, slots: map[string]*valueSlot{}}
}

// get returns b as a string: the interned one when b was seen before (no
// allocation), a new one while there is a place, else v.other.
func (v *values) get(b []byte, now time.Duration) string {
	if sl, ok := v.slots[string(b)]; ok {
		sl.last = now
		return sl.s
	}
	if len(v.slots) >= v.limit && !v.free(now) {
		return v.other
	}
	s := string(b)
	v.slots[s] = &valueSlot{s: s, last: now}
	return s
}

// getString is get for a value that is a string already (kept as it is).
func (v *values) getString(s string, now time.Duration) string {
	if sl, ok := v.slots[s]; ok {
		sl.last = now
		return sl.s
	}
	if len(v.slots) >= v.limit && !v.free(now) {
		return v.other
	}
	v.slots[s] = &valueSlot{s: s, last: now}
	return s
}

// free drops one value not seen for the expiry, if there is one.
func (v *values) free(now time.Duration) bool {
	for k, sl := range v.slots {
		if now-sl.last >= v.expiry {
			delete(v.slots, k)
			return true
		}
	}
	return false
}
