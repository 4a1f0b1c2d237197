// Package httpsniff reads what tokenwire needs from the first bytes of an
// HTTP/1.x request or response: bounded, without allocating (SniffRequest,
// ParseResponse; ParseRequest copies out its strings), and never trusting
// the input (the bytes may be truncated, binary or hostile).
//
// It is not an HTTP parser: it reads a request line, a status line, a few
// headers and the "model" field of a JSON body, and gives up quietly on
// anything else, so that a stream falls back to opaque mode.
package httpsniff

import (
	"bytes"
	"encoding/hex"
)

// MaxPath bounds the length of a reported path.
const MaxPath = 256

// MaxModel bounds the length of a reported model name.
const MaxModel = 128

// Request is what the head of a request says.
type Request struct {
	Method string
	// Path is the request target without query or fragment.
	Path string
	// TraceParent is the W3C traceparent header, when valid.
	TraceParent TraceParent
	// Model is the "model" field of an OpenAI- or Ollama-style JSON body,
	// when it is within the captured bytes.
	Model string
}

// TraceParent is a parsed W3C traceparent header.
type TraceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
	Valid   bool
}

// RequestHead is what the head of a request says, as slices of the bytes
// it was read from: the receiver's metrics path looks them up in its own
// tables without allocating.
type RequestHead struct {
	// Method is one of the methods httpsniff accepts (a constant).
	Method string
	// Path is the request target without query or fragment.
	Path []byte
	// Model is the "model" field of an OpenAI- or Ollama-style JSON body,
	// when it is within the bytes; empty otherwise.
	Model       []byte
	TraceParent TraceParent
}

// method returns the constant for one of the methods tokenwire accepts,
// or "" (a switch on string(b) does not allocate).
func method(b []byte) string {
	switch string(b) {
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

// ParseRequest reads the head of a request. ok is false when b does not
// start with an HTTP/1.x request line.
func ParseRequest(b []byte) (req Request, ok bool) {
	h, ok := SniffRequest(b)
	if !ok {
		return req, false
	}
	return Request{Method: h.Method, Path: string(h.Path), TraceParent: h.TraceParent, Model: string(h.Model)}, true
}

// SniffRequest is ParseRequest without allocating: the values are slices
// of b. ok is false when b does not start with an HTTP/1.x request line.
func SniffRequest(b []byte) (req RequestHead, ok bool) {
	line, rest, found := bytes.Cut(b, []byte("\r\n"))
	if !found {
		return req, false
	}
	m, rest1, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(rest1, []byte(" "))
	if !ok1 || !ok2 || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(target) == 0 || target[0] != '/' {
		return req, false
	}
	if req.Method = method(m); req.Method == "" {
		return RequestHead{}, false
	}
	if i := bytes.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	if len(target) > MaxPath || !printable(target) {
		return RequestHead{}, false
	}
	req.Path = target

	var headers, body []byte
	var complete bool
	if bytes.HasPrefix(rest, []byte("\r\n")) { // no headers at all
		body, complete = rest[2:], true
	} else {
		headers, body, complete = bytes.Cut(rest, []byte("\r\n\r\n"))
	}
	for len(headers) > 0 {
		var h []byte
		h, headers, _ = bytes.Cut(headers, []byte("\r\n"))
		name, value, ok := bytes.Cut(h, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("traceparent")) {
			req.TraceParent = parseTraceParent(bytes.TrimSpace(value))
		}
	}
	if complete {
		req.Model = jsonModel(body)
	}
	return req, true
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

// jsonModel finds "model": "<value>" in a (possibly truncated) JSON body.
// Values with escapes or beyond MaxModel are ignored.
func jsonModel(body []byte) []byte {
	key := []byte(`"model"`)
	for {
		i := bytes.Index(body, key)
		if i < 0 {
			return nil
		}
		v := bytes.TrimLeft(body[i+len(key):], " \t\r\n")
		if len(v) > 0 && v[0] == ':' {
			v = bytes.TrimLeft(v[1:], " \t\r\n")
			if len(v) > 0 && v[0] == '"' {
				end := bytes.IndexByte(v[1:], '"')
				if end > 0 && end <= MaxModel && bytes.IndexByte(v[1:1+end], '\\') < 0 && printable(v[1:1+end]) {
					return v[1 : 1+end]
				}
				return nil
			}
		}
		body = body[i+len(key):]
	}
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

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
