package teststack

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// SDK is an official openai client library whose requests SDKClient
// imitates.
type SDK string

const (
	// SDKPython is openai-python 1.x over httpx: title-case headers in
	// httpx's order, the Stainless platform headers, keep-alive, and the
	// body as Python's json.dumps writes it (", " and ": ").
	SDKPython SDK = "python"
	// SDKNode is openai-node 4.x over node-fetch: lower-case headers,
	// Host last, and the body as JSON.stringify writes it (compact).
	SDKNode SDK = "node"
)

// The versions the header values name.
const (
	pythonSDKVersion = "1.54.4"
	nodeSDKVersion   = "4.73.0"
)

// Message is one chat message.
type Message struct{ Role, Content string }

// ChatRequest is one chat completions request.
type ChatRequest struct {
	Path     string // default /v1/chat/completions (a query may follow)
	Model    string
	Messages []Message // default one user message "hello"
	Stream   bool
	Header   [][2]string // extra headers (e.g. traceparent), after the SDK's own
}

// chatBody is the JSON body with "messages" before "model", as both SDKs
// send it (the order of create()'s parameters): a long conversation puts
// the model name far from the start of the body.
func chatBody(sdk SDK, req ChatRequest) []byte {
	sep, colon := ",", ":"
	if sdk == SDKPython {
		sep, colon = ", ", ": "
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	msgs := req.Messages
	if len(msgs) == 0 {
		msgs = []Message{{"user", "hello"}}
	}
	var b strings.Builder
	b.WriteString(`{"messages"` + colon + "[")
	for i, m := range msgs {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(`{"role"` + colon + q(m.Role) + sep + `"content"` + colon + q(m.Content) + "}")
	}
	b.WriteString("]" + sep + `"model"` + colon + q(req.Model) + sep + `"stream"` + colon + strconv.FormatBool(req.Stream) + "}")
	return []byte(b.String())
}

// requestHead is the request line and headers the SDK would send.
func requestHead(sdk SDK, host, apiKey string, req ChatRequest, bodyLen int) []byte {
	path := req.Path
	if path == "" {
		path = "/v1/chat/completions"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\n", path)
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	switch sdk {
	case SDKNode:
		h("content-length", strconv.Itoa(bodyLen))
		h("accept", "application/json")
		h("content-type", "application/json")
		h("user-agent", "OpenAI/JS "+nodeSDKVersion)
		h("x-stainless-lang", "js")
		h("x-stainless-package-version", nodeSDKVersion)
		h("x-stainless-os", "Linux")
		h("x-stainless-arch", "x64")
		h("x-stainless-runtime", "node")
		h("x-stainless-runtime-version", "v20.20.2")
		h("authorization", "Bearer "+apiKey)
		h("x-stainless-retry-count", "0")
		for _, kv := range req.Header {
			h(kv[0], kv[1])
		}
		h("Accept-Encoding", "gzip,deflate")
		h("Host", host)
		h("Connection", "keep-alive")
	default:
		h("Host", host)
		h("Accept-Encoding", "gzip, deflate")
		h("Connection", "keep-alive")
		h("Accept", "application/json")
		h("Content-Type", "application/json")
		h("User-Agent", "OpenAI/Python "+pythonSDKVersion)
		h("X-Stainless-Lang", "python")
		h("X-Stainless-Package-Version", pythonSDKVersion)
		h("X-Stainless-OS", "Linux")
		h("X-Stainless-Arch", "x64")
		h("X-Stainless-Runtime", "CPython")
		h("X-Stainless-Runtime-Version", "3.11.2")
		h("Authorization", "Bearer "+apiKey)
		h("X-Stainless-Async", "false")
		h("x-stainless-retry-count", "0")
		for _, kv := range req.Header {
			h(kv[0], kv[1])
		}
		h("Content-Length", strconv.Itoa(bodyLen))
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}
