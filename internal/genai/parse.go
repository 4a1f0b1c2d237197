package genai

import "github.com/tokenwire/tokenwire/internal/httpsniff"

// ParseFirst reads the start of a response into dst: the body bytes its
// head's write carried (head may be nil, and may hold no body) and the
// start of its first body write (firstBody, maybe nil, maybe starting with
// a chunk-size line). Both start where events start and may be cut at
// their end. The format is recognised here when dst's is still unknown,
// within what the head's Content-Type allows (NDJSON is only Ollama's,
// SSE never is). It does not allocate beyond interning new finish
// reasons or error types.
func ParseFirst(dst *Response, head, firstBody []byte) {
	p := parser{r: dst, sse: true, ndjson: true}
	if resp, ok := httpsniff.ParseResponse(head); ok {
		p.sse = !resp.NDJSON
		p.ndjson = !resp.EventStream
	}
	p.body(bodyOfHead(head))
	p.body(firstBody)
}

// ParseFirstBody is ParseFirst for a first body write that comes after
// its head's own write, given what that head said (resp, as
// httpsniff.ParseResponse read it): the head's bytes need not be kept
// until the body's write arrives.
func ParseFirstBody(dst *Response, resp httpsniff.Response, firstBody []byte) {
	p := parser{r: dst, sse: !resp.NDJSON, ndjson: !resp.EventStream}
	p.body(firstBody)
}

// ParseTail reads a tail candidate into dst: the last bytes of a body
// write, which end where an event ends but may start anywhere, even inside
// a string. Every line is read from its end (see anchor), so a cut first
// line still gives the keys it holds with their true depth; a candidate
// that is an ordinary chunk gives nothing new. When dst's format is still
// unknown (the first body write was lost), it is recognised from the tail.
func ParseTail(dst *Response, tail []byte) {
	p := parser{r: dst, sse: true, ndjson: true, tail: true}
	p.body(tail)
}

// parser reads the lines of one piece of a body.
type parser struct {
	r           *Response
	sse, ndjson bool // formats the head allows
	tail        bool // b ends at an event's end but may start anywhere
}

func (p *parser) body(b []byte) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = nextLine(b)
		line = trimSpace(line)
		if len(line) == 0 {
			continue
		}
		if name, value, ok := sseField(line); ok {
			switch string(name) {
			case "data":
				p.payload(trimSpace(value), framedSSE)
				continue
			case "event":
				p.event(value)
				continue
			case "id", "retry":
				continue
			}
		}
		// Bare JSON: an NDJSON line, or a tail's first line cut after its
		// "data:" (or inside it). Anything else (chunk sizes, comments) is
		// framing.
		if line[0] == '{' || p.tail && line[len(line)-1] == '}' {
			p.payload(line, framedBare)
		}
	}
}

// event handles an SSE "event:" line: Anthropic and the Responses API name
// their events, which tells the format and when the stream ended.
func (p *parser) event(name []byte) {
	if p.r.Format == FormatUnknown && p.sse {
		p.r.Format = eventFormat(name)
	}
	switch p.r.Format {
	case FormatAnthropic:
		if string(name) == "message_stop" {
			p.r.ended = true
		}
	case FormatOpenAIResponses:
		switch string(name) {
		case "response.completed", "response.incomplete", "response.failed":
			p.r.ended = true
		}
	}
}

func (p *parser) payload(b []byte, fr framing) {
	if len(b) == 0 {
		return
	}
	if string(b) == "[DONE]" {
		if p.r.Format == FormatOpenAI {
			p.r.ended = true
		}
		return
	}
	var w walker
	if p.tail {
		var kinds [maxDepth + 1]byte
		start, depth, ok := anchor(b, &kinds)
		if !ok {
			return
		}
		w.reset(b, start, depth, &kinds)
	} else {
		if b[0] != '{' {
			return
		}
		w.reset(b, 0, 0, nil)
	}
	if p.r.Format == FormatUnknown {
		probe := w
		f := detect(&probe, fr, p.tail)
		if f == FormatUnknown || f == FormatOllama && !p.ndjson || f != FormatOllama && !p.sse {
			return
		}
		p.r.Format = f
	}
	// Ollama's lines are bare; the others' are "data:" fields, except a
	// tail's first line, whose "data:" may be cut off.
	if (p.r.Format == FormatOllama) != (fr == framedBare) && !(p.tail && fr == framedBare) {
		return
	}
	extract(p.r, &w)
}
