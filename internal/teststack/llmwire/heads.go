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

// AnthropicAPIHeaders are the headers of a streamed Messages response from
// Anthropic's API, in the order it sends them, as a gateway that relays
// them passes them on: the rate-limit headers its documentation lists
// (docs.anthropic.com/en/api/rate-limits, "Response headers") and the
// others a streamed response carried in anthropics/anthropic-sdk-typescript
// issue 450 (request-id, Cloudflare's and Google's front ends). The values
// are made up in their documented shapes. About 1.1 KiB, twice what the
// kernel looks for "chunked" in: hosted APIs' heads are this long.
var AnthropicAPIHeaders = [][2]string{
	{"Content-Type", "text/event-stream; charset=utf-8"},
	{"Cache-Control", "no-cache"},
	{"anthropic-ratelimit-input-tokens-limit", "400000"},
	{"anthropic-ratelimit-input-tokens-remaining", "399000"},
	{"anthropic-ratelimit-input-tokens-reset", "2025-06-04T01:00:01Z"},
	{"anthropic-ratelimit-output-tokens-limit", "80000"},
	{"anthropic-ratelimit-output-tokens-remaining", "80000"},
	{"anthropic-ratelimit-output-tokens-reset", "2025-06-04T01:00:00Z"},
	{"anthropic-ratelimit-requests-limit", "4000"},
	{"anthropic-ratelimit-requests-remaining", "3999"},
	{"anthropic-ratelimit-requests-reset", "2025-06-04T01:00:00Z"},
	{"anthropic-ratelimit-tokens-limit", "480000"},
	{"anthropic-ratelimit-tokens-remaining", "479000"},
	{"anthropic-ratelimit-tokens-reset", "2025-06-04T01:00:01Z"},
	{"request-id", "req_011CPnCqG7wWm4gPRXmzPUAJ"},
	{"strict-transport-security", "max-age=31536000; includeSubDomains; preload"},
	{"anthropic-organization-id", "3f7c9a1e-5b2d-4c8f-9e6a-1d2b3c4d5e6f"},
	{"via", "1.1 google"},
	{"x-cloud-trace-context", "5f3c2a1b0e9d8c7b6a5f4e3d2c1b0a99"},
	{"cf-cache-status", "DYNAMIC"},
	{"X-Robots-Tag", "none"},
	{"Server", "cloudflare"},
	{"CF-RAY", "94a1b2c3d4e5f607-SJC"},
}
