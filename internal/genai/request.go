package genai

import "github.com/tokenwire/tokenwire/internal/httpsniff"

// RequestScanner reads a request as the server read it, in consecutive
// slices of any size: the request line's method and path, and the JSON
// body's top-level "model" and "stream". Its state is a fixed 584 bytes
// and Write never allocates, so it can follow every request a collector
// sees. It trusts nothing: a slice may end anywhere (in a key, an escape,
// a chunk-size line), the body may be truncated, binary or not JSON, and
// then it reports what it proved so far and ignores the rest.
//
// Only the body's depth-0 members count: "model" inside messages, tools,
// metadata or any string is never the request's model. A model whose value
// is cut, too long (httpsniff.MaxModel), non-ASCII or escaped beyond \/, \\
// and \" is not reported. A later top-level "model" replaces an earlier
// one, as JSON decoders in the servers do.
type RequestScanner struct {
	n     int64 // bytes consumed
	phase uint8

	method    [8]byte
	methodLen uint8
	path      [httpsniff.MaxPath]byte
	pathLen   uint16
	pathEnd   bool // '?' or '#' seen: the rest of the target is not the path
	pathBad   bool
	proto     uint8 // bytes of "HTTP/1." matched
	lineLen   uint16

	// Body framing: identity, or chunked with its state.
	chunked    bool
	chunkState uint8
	chunkLeft  int64
	chunkSize  uint8 // hex digits read

	json jsonTop
}

// Scanner phases.
const (
	phMethod = iota
	phTarget
	phProto
	phHeaders
	phBodyStart
	phBody
	phDone
)

// Chunked body states.
const (
	csSize = iota
	csExt
	csData
	csDataEnd
)

// Reset clears s for another request.
func (s *RequestScanner) Reset() { *s = RequestScanner{} }

// Len returns how many bytes s has been given.
func (s *RequestScanner) Len() int64 { return s.n }

// Write feeds the next slice of the request.
func (s *RequestScanner) Write(p []byte) {
	s.n += int64(len(p))
	for i := 0; i < len(p) && s.phase != phDone; {
		if s.phase >= phBodyStart {
			i += s.body(p[i:])
			continue
		}
		s.head(p[i])
		i++
	}
}

// WriteAt feeds the slice at offset off of the request: bytes already seen
// are skipped, and a gap (a lost slice) stops the scan, keeping what was
// found before it.
func (s *RequestScanner) WriteAt(off int64, p []byte) {
	switch {
	case off > s.n:
		s.phase = phDone
		s.n = off + int64(len(p))
	case off+int64(len(p)) <= s.n:
	default:
		s.Write(p[s.n-off:])
	}
}

// head reads one byte of the request line or headers.
func (s *RequestScanner) head(c byte) {
	switch s.phase {
	case phMethod:
		switch {
		case c == ' ' && s.methodLen > 0:
			s.phase = phTarget
		case c >= 'A' && c <= 'Z' && int(s.methodLen) < len(s.method):
			s.method[s.methodLen] = c
			s.methodLen++
		default:
			s.phase = phDone // not a request line
		}
	case phTarget:
		switch {
		case c == ' ':
			if s.pathLen == 0 || s.path[0] != '/' {
				s.pathBad = true
			}
			s.phase = phProto
		case c == '?' || c == '#':
			s.pathEnd = true
		case c < 0x21 || c > 0x7e:
			s.phase = phDone
		case !s.pathEnd:
			if int(s.pathLen) < len(s.path) {
				s.path[s.pathLen] = c
				s.pathLen++
			} else {
				s.pathBad = true
			}
		}
	case phProto:
		const want = "HTTP/1."
		switch {
		case int(s.proto) < len(want):
			if c != want[s.proto] {
				s.phase = phDone
				return
			}
			s.proto++
		case c == '\n':
			s.phase = phHeaders
		}
	case phHeaders:
		// Headers end at an empty line ("\r\n" or a bare "\n").
		switch c {
		case '\n':
			if s.lineLen == 0 {
				s.phase = phBodyStart
			}
			s.lineLen = 0
		case '\r':
		default:
			if s.lineLen < 1<<15 {
				s.lineLen++
			}
		}
	}
}

// body reads body bytes from p and returns how many it used. The first
// byte that is not white space tells the framing: '{' a JSON object, a hex
// digit a chunk-size line (a chunked body; the JSON is in the chunks).
func (s *RequestScanner) body(p []byte) int {
	if s.phase == phBodyStart {
		c := p[0]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			return 1
		case c == '{':
			s.phase = phBody
		case hexVal(c) >= 0:
			s.phase, s.chunked = phBody, true
		default:
			s.phase = phDone
			return 1
		}
	}
	if !s.chunked {
		n := s.json.write(p)
		if s.json.done {
			s.phase = phDone
		}
		return n
	}
	return s.chunk(p)
}

// chunk reads chunked framing, passing chunk data to the JSON reader.
func (s *RequestScanner) chunk(p []byte) int {
	c := p[0]
	switch s.chunkState {
	case csSize:
		switch v := hexVal(c); {
		case v >= 0:
			if s.chunkSize >= 15 {
				s.phase = phDone // no body chunk is that large
				return 1
			}
			s.chunkLeft = s.chunkLeft<<4 | int64(v)
			s.chunkSize++
		case c == ';' || c == ' ' || c == '\t':
			s.chunkState = csExt
		case c == '\r':
		case c == '\n':
			s.endSize()
		default:
			s.phase = phDone
		}
		return 1
	case csExt:
		if c == '\n' {
			s.endSize()
		}
		return 1
	case csData:
		n := int64(len(p))
		if n > s.chunkLeft {
			n = s.chunkLeft
		}
		used := s.json.write(p[:n])
		s.chunkLeft -= int64(used)
		if s.json.done {
			s.phase = phDone
		} else if s.chunkLeft == 0 {
			s.chunkState = csDataEnd
		}
		return used
	default: // csDataEnd: the CRLF after a chunk's data
		switch c {
		case '\r':
		case '\n':
			s.chunkState, s.chunkLeft, s.chunkSize = csSize, 0, 0
		default:
			s.phase = phDone
		}
		return 1
	}
}

func (s *RequestScanner) endSize() {
	if s.chunkSize == 0 || s.chunkLeft == 0 {
		s.phase = phDone // the last chunk, or no size at all
		return
	}
	s.chunkState = csData
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// Method returns the request's method, for the methods httpsniff accepts
// (a constant string), or "".
func (s *RequestScanner) Method() string {
	switch string(s.method[:s.methodLen]) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "PATCH":
		return "PATCH"
	case "HEAD":
		return "HEAD"
	case "OPTIONS":
		return "OPTIONS"
	}
	return ""
}

// Path returns the request target's path (without query or fragment) once
// the request line is read, or nil. The bytes are s's own.
func (s *RequestScanner) Path() []byte {
	if s.phase < phHeaders && s.phase != phDone || s.pathBad || s.proto < 7 {
		return nil
	}
	return s.path[:s.pathLen]
}

// Model returns gen_ai.request.model: the body's top-level "model", or
// else the model a Gemini, Vertex AI or Bedrock path names; nil when
// neither is known. The bytes are s's own: copy or intern them to keep.
func (s *RequestScanner) Model() []byte {
	if s.json.modelLen > 0 {
		return s.json.model[:s.json.modelLen]
	}
	return ModelFromPath(s.Path())
}

// Stream returns the body's top-level "stream" (gen_ai.request.stream),
// and whether it was seen.
func (s *RequestScanner) Stream() (stream, known bool) {
	return s.json.stream, s.json.streamKnown
}

// Operation returns gen_ai.operation.name for the request, or "".
func (s *RequestScanner) Operation() string {
	return Operation(s.Method(), s.Path())
}
