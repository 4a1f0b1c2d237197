package teststack

import (
	"fmt"
	"strconv"
	"strings"
)

// DoneEvent ends an OpenAI-style stream; tokenwire treats it as the end,
// not as a chunk.
const DoneEvent = "data: [DONE]\n\n"

// IsEventLine says whether line, one line of an SSE body (its line end
// trimmed or not), is a data event other than [DONE]: one a client counts
// as a piece of the answer.
func IsEventLine(line string) bool {
	return strings.HasPrefix(strings.TrimSpace(line), "data:") && !IsDoneLine(line)
}

// IsDoneLine reports whether line is the data: [DONE] line that ends an
// OpenAI-style stream.
func IsDoneLine(line string) bool {
	return strings.TrimSpace(line) == strings.TrimSpace(DoneEvent)
}

// TokenEvent is a small SSE event: data: {"token":"t<i>"}.
func TokenEvent(i int) string {
	return fmt.Sprintf("data: {\"token\":\"t%d\"}\n\n", i)
}

// OpenAIEvent is the i-th event of an OpenAI-style chat completion
// stream, the same length for every i below 1000 so that a stream's bytes
// are known exactly. The Python and Node servers write the same bytes.
func OpenAIEvent(i int) string {
	return fmt.Sprintf("data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%03d\"}}]}\n\n", i)
}

// OllamaLine is the i-th line of an Ollama-style NDJSON chat stream
// (application/x-ndjson over a chunked body), and OllamaEnd its last line.
func OllamaLine(i int) string {
	return fmt.Sprintf("{\"message\":{\"role\":\"assistant\",\"content\":\"tok%03d\"},\"done\":false}\n", i)
}

// OllamaEnd is the last line of an Ollama-style stream.
const OllamaEnd = "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true}\n"

// Format is a streamed body's shape, as the Python and Node servers take
// it (TW_FORMAT).
type Format string

const (
	// FormatOpenAI is SSE: OpenAIEvent per event, then DoneEvent.
	FormatOpenAI Format = "openai"
	// FormatOllama is NDJSON: OllamaLine per event, then OllamaEnd.
	FormatOllama Format = "ollama"
)

// Body is the whole body a server writes for n events in format f: what
// a client reads once the chunked framing is removed.
func (f Format) Body(n int) string {
	var b []byte
	for i := range n {
		b = append(b, f.event(i)...)
	}
	return string(append(b, f.end()...))
}

func (f Format) event(i int) string {
	if f == FormatOllama {
		return OllamaLine(i)
	}
	return OpenAIEvent(i)
}

func (f Format) end() string {
	if f == FormatOllama {
		return OllamaEnd
	}
	return DoneEvent
}

// ChunkedSize is how many bytes one write of n bytes puts on the wire in
// an HTTP/1.1 chunked body: "<hex n>\r\n" + data + "\r\n". tokenwire
// counts body bytes as written, framing included.
func ChunkedSize(n int) int {
	return len(strconv.FormatInt(int64(n), 16)) + 2 + n + 2
}

// ChunkFramed is data as one chunk of a chunked body.
func ChunkFramed(data string) string {
	return strconv.FormatInt(int64(len(data)), 16) + "\r\n" + data + "\r\n"
}
