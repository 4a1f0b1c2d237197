package genai

import "bytes"

// nextLine cuts the first line off b: the line without its "\n" and any
// trailing "\r", the rest, and whether the line ended with "\n". JSON
// never holds a raw newline, so lines split SSE fields, NDJSON values and
// chunked-encoding size lines apart whatever the write boundaries were.
func nextLine(b []byte) (line, rest []byte, terminated bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		line, rest = b, nil
	} else {
		line, rest, terminated = b[:i], b[i+1:], true
	}
	for len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, rest, terminated
}

// sseField splits an SSE line into its field name and value (one space
// after the colon is not part of the value). ok is false for lines that
// are not "name:value" with a name of letters (comments, chunk sizes,
// bare JSON).
func sseField(line []byte) (name, value []byte, ok bool) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 || i > 8 {
		return nil, nil, false
	}
	for _, c := range line[:i] {
		if c < 'a' || c > 'z' {
			return nil, nil, false
		}
	}
	value = line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return line[:i], value, true
}

// bodyOfHead returns the body bytes a response's first write carried
// after its head, passing over interim 1xx heads, or nil when head is not
// an HTTP/1.x response or carries no body bytes.
func bodyOfHead(head []byte) []byte {
	for len(head) >= 12 && bytes.HasPrefix(head, []byte("HTTP/1.")) {
		i := bytes.Index(head, []byte("\r\n\r\n"))
		if i < 0 {
			return nil
		}
		body := head[i+4:]
		if head[9] != '1' {
			return body
		}
		head = body
	}
	return nil
}

// trimSpace removes ASCII white space at both ends.
func trimSpace(b []byte) []byte {
	return bytes.TrimSpace(b)
}
