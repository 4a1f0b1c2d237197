package genai

import "testing"

// endsStreamEvent mirrors the stream probe's ends_stream_event
// (bpf/stream_peek.h): whether the kernel sends a write's end as a tail
// candidate. It is a copy for this diagnostic only; the kernel's is the
// one that counts.
func endsStreamEvent(write string) bool {
	if len(write) < 16 {
		return false
	}
	t := write[len(write)-16:]
	e := 15
	for i := 0; i < 5 && (t[e] == '\r' || t[e] == '\n'); i++ {
		e--
	}
	if e < 4 || t[e] != '}' {
		return false
	}
	c1, c2, c3 := t[e-1], t[e-2], t[e-3]
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	return c1 == '}' && c2 != '"' || c1 == ']' && c2 == '}' && c3 == '"' || isDigit(c1) && isDigit(c2) && isDigit(c3)
}

// TestKernelTailCandidates logs which of the fixtures' writes the kernel
// would send as tail candidates: a final event it does not flag is read
// only if it is also the first body write.
func TestKernelTailCandidates(t *testing.T) {
	for _, s := range streams {
		for i, w := range s.writes {
			if len(w) > 32 {
				t.Logf("%-45s write %d: tail candidate %v", s.name, i, endsStreamEvent(w))
			}
		}
	}
}

// tailOf is what the kernel sends of a write it flags: its last 512 bytes.
func tailOf(write string) []byte {
	if len(write) > 512 {
		write = write[len(write)-512:]
	}
	return []byte(write)
}

// firstOf is what the kernel sends of the first body write: its first 512.
func firstOf(write string) []byte {
	if len(write) > 512 {
		write = write[:512]
	}
	return []byte(write)
}
