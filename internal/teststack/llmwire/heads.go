package llmwire

import "strings"

// Response heads of the servers whose bodies the other files hold, for
// streaming them whole. UvicornHead (openai.go), OllamaHead and TGIHead
// (native.go) are the others.

// OllamaSSEHead is the head Ollama's OpenAI- and Anthropic-compatible
// routes get from Go's net/http (gin's writer; the middleware sets
// Content-Type text/event-stream): headers in sorted order, Date, chunked
// because no Content-Length was set, written with the first chunk on its
// first flush.
const OllamaSSEHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" +
	"Date: Wed, 04 Jun 2025 01:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n"

// LlamaCppHead is the head llama.cpp's server (cpp-httplib) writes, alone,
// before a streamed body (set_chunked_content_provider): cpp-httplib keeps
// headers in a multimap ordered without regard to case and adds
// Keep-Alive and Transfer-Encoding itself; the server sets Server and the
// CORS header.
const LlamaCppHead = "HTTP/1.1 200 OK\r\nAccess-Control-Allow-Origin: \r\nContent-Type: text/event-stream\r\n" +
	"Keep-Alive: timeout=5, max=100\r\nServer: llama.cpp\r\nTransfer-Encoding: chunked\r\n\r\n"

// LastChunk ends a chunked body; the servers above write it on its own
// once the stream is over.
const LastChunk = "0\r\n\r\n"

// Events splits a run of SSE events into its events, each with its
// terminating blank line, for a server that writes them one at a time.
func Events(run string) []string {
	var out []string
	for run != "" {
		i := strings.Index(run, "\n\n")
		if i < 0 {
			return append(out, run)
		}
		out = append(out, run[:i+2])
		run = run[i+2:]
	}
	return out
}
