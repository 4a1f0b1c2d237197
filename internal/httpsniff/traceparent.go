package httpsniff

import "encoding/hex"

// TraceParent is a parsed W3C traceparent header.
type TraceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
	Valid   bool
}

// traceParentName is the header's name, lower case (names are matched
// without regard to case).
const traceParentName = "traceparent"

// maxTraceParentValue is how much of a header value is kept: a version-00
// value is 55 bytes; a later version may add fields, of which only the
// dash after the 55th byte is read.
const maxTraceParentValue = 64

// TraceParentScanner finds the traceparent header of a request given to
// it as consecutive slices of any size, as the server read it: the header
// may sit anywhere among the headers, after kilobytes of others, and be
// split between slices. Its state is fixed (about 100 bytes), it never
// allocates, and it stops at the end of the headers, so the body costs
// nothing. As in a header map, a later traceparent replaces an earlier
// one, valid or not.
type TraceParentScanner struct {
	n      int64 // bytes consumed
	state  uint8
	name   uint8 // bytes of traceParentName matched on this line
	valLen uint8
	over   bool // the value went on beyond val with more than white space
	val    [maxTraceParentValue]byte
	tp     TraceParent
}

// Scanner states.
const (
	tpRequestLine = iota // skipping the request line
	tpLineStart          // at the start of a header line
	tpName               // in a header name that may be traceparent
	tpNameEnd            // after the name, before the colon (white space)
	tpValue              // in traceparent's value
	tpSkip               // in a line of no interest
	tpDone               // the headers ended, or a slice was lost
)

// Reset clears s for another request.
func (s *TraceParentScanner) Reset() { *s = TraceParentScanner{} }

// TraceParent returns the last traceparent header seen so far; Valid is
// false when there was none or it broke the W3C rules.
func (s *TraceParentScanner) TraceParent() TraceParent { return s.tp }

// WriteAt feeds the slice at offset off of the request: bytes already seen
// are skipped, and a gap (a lost slice) stops the scan, keeping what was
// found before it.
func (s *TraceParentScanner) WriteAt(off int64, p []byte) {
	switch {
	case off > s.n:
		s.state = tpDone
		s.n = off + int64(len(p))
	case off+int64(len(p)) <= s.n:
	default:
		s.Write(p[s.n-off:])
	}
}

// Write feeds the next slice of the request.
func (s *TraceParentScanner) Write(p []byte) {
	s.n += int64(len(p))
	for i := 0; i < len(p) && s.state != tpDone; i++ {
		s.byte(p[i])
	}
}

func (s *TraceParentScanner) byte(c byte) {
	switch s.state {
	case tpRequestLine, tpSkip:
		if c == '\n' {
			s.state = tpLineStart
		}
	case tpLineStart:
		switch c {
		case '\n':
			s.state = tpDone // the empty line: the headers are over
		case '\r':
		case ' ', '\t':
			s.state = tpSkip // an obsolete folded line continues the last
		default:
			s.name, s.state = 0, tpName
			s.nameByte(c)
		}
	case tpName:
		s.nameByte(c)
	case tpNameEnd:
		switch c {
		case ':':
			s.state, s.valLen, s.over = tpValue, 0, false
		case ' ', '\t':
		case '\n':
			s.state = tpLineStart
		default:
			s.state = tpSkip
		}
	case tpValue:
		switch {
		case c == '\n':
			s.tp = parseTraceParent(s.value())
			s.state = tpLineStart
		case s.valLen == 0 && (c == ' ' || c == '\t'): // leading white space
		case int(s.valLen) < len(s.val):
			s.val[s.valLen] = c
			s.valLen++
		case c != ' ' && c != '\t' && c != '\r':
			s.over = true // more than white space beyond the kept bytes
		}
	}
}

// nameByte matches one byte of a header name against traceParentName.
func (s *TraceParentScanner) nameByte(c byte) {
	switch {
	case c == '\n':
		s.state = tpLineStart
	case c == ':' || c == ' ' || c == '\t':
		if int(s.name) != len(traceParentName) {
			s.state = tpSkip
			return
		}
		s.state = tpNameEnd
		if c == ':' {
			s.state, s.valLen, s.over = tpValue, 0, false
		}
	case int(s.name) < len(traceParentName) && c|0x20 == traceParentName[s.name]:
		s.name++
	default:
		s.state = tpSkip
	}
}

// value returns the header value without trailing white space. A value
// longer than maxTraceParentValue is returned cut, as it is: only a later
// version may be that long, and its rules read the first 56 bytes.
func (s *TraceParentScanner) value() []byte {
	v := s.val[:s.valLen]
	if s.over {
		return v
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t' || v[len(v)-1] == '\r') {
		v = v[:len(v)-1]
	}
	return v
}

// parseTraceParent reads a W3C traceparent header strictly: two
// lower-case hex digits of version (not ff), a 32-digit trace ID and a
// 16-digit parent ID, neither all zeros, and two digits of flags, all
// lower-case hex, dash-separated. Version 00 has nothing after the flags;
// a later version may add fields after another dash, which are ignored.
func parseTraceParent(v []byte) TraceParent {
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return TraceParent{}
	}
	if !lowerHex(v[:2]) || string(v[:2]) == "ff" || string(v[:2]) == "00" && len(v) != 55 || len(v) > 55 && v[55] != '-' {
		return TraceParent{}
	}
	if !lowerHex(v[3:35]) || !lowerHex(v[36:52]) || !lowerHex(v[53:55]) {
		return TraceParent{}
	}
	var tp TraceParent
	hex.Decode(tp.TraceID[:], v[3:35])
	hex.Decode(tp.SpanID[:], v[36:52])
	var f [1]byte
	hex.Decode(f[:], v[53:55])
	tp.Flags = f[0]
	if tp.TraceID == [16]byte{} || tp.SpanID == [8]byte{} {
		return TraceParent{}
	}
	tp.Valid = true
	return tp
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
