package tokenwirereceiver

import (
	"bytes"

	"github.com/tokenwire/tokenwire/internal/httpsniff"
)

// The metrics path needs from the heads only the method, path and model
// of the request and whether the response is HTTP and streamed.
// httpsniff returns those as fresh strings, an allocation or three per
// stream; these functions apply httpsniff's rules but return slices of the
// captured heads, so that the receiver can look the values up in its
// interning maps without allocating. TestSniffMatchesHTTPSniff and
// FuzzSniffMatchesHTTPSniff keep the two in step. Spans, which allocate
// anyway, still take the traceparent and raw path from httpsniff.

// sniffRequest is httpsniff.ParseRequest without the traceparent: the
// method, path and model it would return, as slices of b (model is empty
// when not found).
func sniffRequest(b []byte) (method, path, model []byte, ok bool) {
	line, rest, found := bytes.Cut(b, []byte("\r\n"))
	if !found {
		return nil, nil, nil, false
	}
	method, rest1, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(rest1, []byte(" "))
	if !ok1 || !ok2 || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(target) == 0 || target[0] != '/' {
		return nil, nil, nil, false
	}
	if methodString(method) == "" {
		return nil, nil, nil, false
	}
	if i := bytes.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	if len(target) > httpsniff.MaxPath || !printable(target) {
		return nil, nil, nil, false
	}
	var body []byte
	var complete bool
	if bytes.HasPrefix(rest, []byte("\r\n")) { // no headers at all
		body, complete = rest[2:], true
	} else {
		_, body, complete = bytes.Cut(rest, []byte("\r\n\r\n"))
	}
	if complete {
		model = jsonModel(body)
	}
	return method, target, model, true
}

// methodString returns the constant for one of the methods httpsniff
// accepts, or "" (a switch on string(b) does not allocate).
func methodString(b []byte) string {
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

// jsonModel is httpsniff's "model" finder, returning a slice of body.
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
				if end > 0 && end <= httpsniff.MaxModel && bytes.IndexByte(v[1:1+end], '\\') < 0 && printable(v[1:1+end]) {
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

// sniffResponse is httpsniff.ParseResponse reduced to ok and Streamed().
func sniffResponse(b []byte) (streamed, ok bool) {
	line, rest, found := bytes.Cut(b, []byte("\r\n"))
	if !found || !bytes.HasPrefix(line, []byte("HTTP/1.")) || len(line) < 12 || line[8] != ' ' {
		return false, false
	}
	// httpsniff uses strconv.Atoi on these three bytes: a sign leaves at
	// most two digits, below 100, so only three digits can pass.
	d := line[9:12]
	if d[0] < '1' || d[0] > '5' || d[1] < '0' || d[1] > '9' || d[2] < '0' || d[2] > '9' {
		return false, false
	}
	var eventStream, ndjson, chunked bool
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
			eventStream = bytes.EqualFold(ct, []byte("text/event-stream"))
			ndjson = bytes.EqualFold(ct, []byte("application/x-ndjson"))
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			chunked = containsChunked(value)
		}
	}
	return eventStream || chunked || ndjson, true
}

// containsChunked is bytes.Contains(bytes.ToLower(v), "chunked") without
// the copy for ASCII values; others (rare, and ToLower maps some non-ASCII
// letters to ASCII ones) take httpsniff's way.
func containsChunked(v []byte) bool {
	const word = "chunked"
	for _, c := range v {
		if c >= 0x80 {
			return bytes.Contains(bytes.ToLower(v), []byte(word))
		}
	}
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
