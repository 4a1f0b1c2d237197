// Package httpsniff reads what tokenwire needs from the heads of HTTP/1.x
// requests and responses: a request's W3C traceparent, wherever it sits
// in the head and however the head was split into reads
// (TraceParentScanner), and a response's status and framing
// (ParseResponse). Both are bounded, allocate nothing and trust nothing:
// the bytes may be truncated, binary or hostile.
//
// It is not an HTTP parser: it reads a status line and a few headers and
// gives up quietly on anything else, so that a stream falls back to opaque
// mode. The request line and the JSON body are internal/genai's
// (RequestScanner).
package httpsniff

import "bytes"

// MaxPath bounds the length of a reported path.
const MaxPath = 256

// MaxModel bounds the length of a reported model name (internal/genai's
// request and response models).
const MaxModel = 128

// Response is what the head of a response says.
type Response struct {
	Status int
	// EventStream is set for Content-Type: text/event-stream (SSE).
	EventStream bool
	// Chunked is set for Transfer-Encoding: chunked.
	Chunked bool
	// ContentLength is the declared body length, or -1.
	ContentLength int64
	// NDJSON is set for application/x-ndjson (Ollama's streaming format).
	NDJSON bool
}

// Streamed reports whether the response is delivered in pieces: SSE,
// chunked or newline-delimited JSON. A response with a Content-Length, or
// a close-delimited body of another type (Go's and many servers' error
// pages), is not a stream.
func (r Response) Streamed() bool {
	return r.EventStream || r.Chunked || r.NDJSON
}

// ParseResponse reads the head of a response without allocating. ok is
// false when b does not start with an HTTP/1.x status line. Interim heads
// (1xx: 100 Continue, 103 Early Hints) written with the final one are
// passed over: the final head is the response's.
func ParseResponse(b []byte) (resp Response, ok bool) {
	for len(b) > 12 && bytes.HasPrefix(b, []byte("HTTP/1.")) && b[9] == '1' && b[8] == ' ' {
		_, rest, found := bytes.Cut(b, []byte("\r\n\r\n"))
		if !found || len(rest) == 0 {
			break // an interim head alone is read as it is
		}
		b = rest
	}
	resp.ContentLength = -1
	line, rest, found := bytes.Cut(b, []byte("\r\n"))
	if !found || !bytes.HasPrefix(line, []byte("HTTP/1.")) || len(line) < 12 || line[8] != ' ' {
		return resp, false
	}
	d := line[9:12]
	if d[0] < '1' || d[0] > '5' || !isDigit(d[1]) || !isDigit(d[2]) {
		return resp, false
	}
	resp.Status = int(d[0]-'0')*100 + int(d[1]-'0')*10 + int(d[2]-'0')
	headers, _, _ := bytes.Cut(rest, []byte("\r\n\r\n"))
	for len(headers) > 0 {
		var h []byte
		h, headers, _ = bytes.Cut(headers, []byte("\r\n"))
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		name, value = bytes.TrimSpace(name), bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("content-type")):
			ct, _, _ := bytes.Cut(value, []byte(";"))
			ct = bytes.TrimSpace(ct)
			resp.EventStream = bytes.EqualFold(ct, []byte("text/event-stream"))
			resp.NDJSON = bytes.EqualFold(ct, []byte("application/x-ndjson"))
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			resp.Chunked = containsFold(value, "chunked")
		case bytes.EqualFold(name, []byte("content-length")):
			resp.ContentLength = contentLength(value)
		}
	}
	return resp, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// containsFold reports whether v contains word (lower-case ASCII), ignoring
// ASCII case.
func containsFold(v []byte, word string) bool {
next:
	for i := 0; i+len(word) <= len(v); i++ {
		for j := range len(word) {
			c := v[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != word[j] {
				continue next
			}
		}
		return true
	}
	return false
}

// contentLength reads a Content-Length value (1*DIGIT), or -1 when it is
// not one or overflows.
func contentLength(v []byte) int64 {
	if len(v) == 0 || len(v) > 18 {
		return -1
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
