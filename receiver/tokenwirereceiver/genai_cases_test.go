package tokenwirereceiver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// genaiCase is one request and the response a server streams back, write
// for write as that server writes it (the head first), and what tokenwire
// must report of it. The expectations are what the kernel lets through:
// the start of the first body write, and the ends of the writes whose last
// bytes look like a stream's last event (bpf/stream_peek.h,
// ends_stream_event). Where that misses a final event, the stream is
// reported without what it held, and the case says so.
type genaiCase struct {
	name   string
	path   string
	body   string
	writes []string
	want   genaiWant
	// traceparent: the request carries one after 6 KiB of headers.
	traceparent bool
}

// genaiWant is a stream's GenAI attributes on its span. Counts of -1 are
// not reported; "" attributes are left off.
type genaiWant struct {
	format, provider, operation string
	reqModel, respModel, respID string
	apiType, errType            string
	input, output               int64
	reasons                     []string
	chunks                      int64
}

// sdkBody is a request body in the OpenAI Python SDK's order: the
// messages, then the model and the options.
func sdkBody(model, content string, extra map[string]any) string {
	b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": content}}})
	s := strings.TrimSuffix(string(b), "}")
	if model != "" {
		s += `,"model":` + quote(model)
	}
	for k, v := range extra {
		e, _ := json.Marshal(v)
		s += `,` + quote(k) + `:` + string(e)
	}
	return s + "}"
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// chunked frames each event as its own chunk of a chunked body, one write
// each, as uvicorn, net/http, hyper and cpp-httplib write a flushed event.
func chunked(events ...string) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = llmwire.Chunked(e)
	}
	return out
}

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// vllmChatEvents are the events vLLM yields for a chat completion with
// stream_options.include_usage: the role chunk, tokens, the finish chunk,
// the usage chunk, [DONE].
var vllmChatEvents = []string{llmwire.VLLMChatFirst, llmwire.VLLMChatToken, llmwire.VLLMChatToken, llmwire.VLLMChatToken,
	llmwire.VLLMChatFinish, llmwire.VLLMChatUsage, llmwire.SSEDone}

// vllmChatWant is what the kernel lets tokenwire read of vllmChatEvents:
// not the finish reason (the finish chunk ends in `"token_ids":null}]}`,
// not a last event's ending), the usage chunk whole.
var vllmChatWant = genaiWant{format: "openai", provider: genai.ProviderOpenAI, operation: genai.OperationChat,
	reqModel: llmwire.VLLMChatModel, respModel: llmwire.VLLMChatModel, respID: llmwire.VLLMChatID,
	apiType: genai.OpenAIAPITypeChatCompletions, input: 12, output: 28, chunks: 6}

// anthropicEvents are the events of Anthropic's documented Messages
// stream; anthropicBody asks for them, and anthropicWant is what the
// kernel lets tokenwire read of them, one event per chunk.
var (
	anthropicEvents = llmwire.Events(llmwire.AnthropicDocsStart + llmwire.AnthropicDocsDelta + llmwire.AnthropicDocsDelta + llmwire.AnthropicDocsEnd)
	anthropicBody   = `{"model":"claude-3-5-sonnet-20241022","max_tokens":1024,"messages":[{"role":"user","content":"Hello"}],"stream":true}`
	anthropicWant   = genaiWant{format: "anthropic", provider: genai.ProviderAnthropic, operation: genai.OperationChat,
		reqModel: "claude-3-5-sonnet-20241022", respModel: "claude-3-5-sonnet-20241022", respID: "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
		input: 25, output: 15, reasons: []string{"end_turn"}, chunks: int64(len(anthropicEvents))}
)

// wireCases are streamed from a teststack.WireServer, one port whose
// provider is not configured.
func wireCases() []genaiCase {
	noUsage := map[string]any{"stream": true}
	withUsage := map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}
	return []genaiCase{{
		name: "vLLM completions, usage chunk", path: "/v1/completions",
		body:   `{"model":"Qwen/Qwen2.5-7B","prompt":"Hello","max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`,
		writes: join([]string{llmwire.UvicornHead}, chunked(llmwire.VLLMCmplToken, llmwire.VLLMCmplToken, llmwire.VLLMCmplFinish, llmwire.VLLMCmplUsage, llmwire.SSEDone), []string{llmwire.LastChunk}),
		// The finish chunk ends `"token_ids":null}]}`: its reason is not read.
		want: genaiWant{format: "openai", provider: genai.ProviderOpenAI, operation: genai.OperationTextCompletion,
			reqModel: "Qwen/Qwen2.5-7B", respModel: "Qwen/Qwen2.5-7B", respID: "cmpl-5c2d4e6f8a0b4c1d9e3f5a7b9c1d3e5f",
			input: 5, output: 16, chunks: 4},
	}, {
		name: "Ollama OpenAI chat, no usage chunk", path: "/v1/chat/completions",
		body:   sdkBody("llama3.2", "hi", noUsage),
		writes: join([]string{llmwire.OllamaSSEHead + llmwire.Chunked(llmwire.OllamaOAIFirst)}, chunked(llmwire.OllamaOAIFinish, llmwire.SSEDone), []string{llmwire.LastChunk}),
		want: genaiWant{format: "openai", provider: genai.ProviderOpenAI, operation: genai.OperationChat, reqModel: "llama3.2",
			respModel: "llama3.2", respID: "chatcmpl-392", apiType: genai.OpenAIAPITypeChatCompletions,
			input: -1, output: -1, reasons: []string{"stop"}, chunks: 2},
	}, {
		name: "OpenAI Responses API, response object last", path: "/v1/responses",
		body:   `{"model":"gpt-4o","input":"Tell me a story","max_output_tokens":16,"stream":true}`,
		writes: join([]string{llmwire.UvicornHead}, chunked(llmwire.OAIRespCreated, llmwire.OAIRespDelta, llmwire.OAIRespIncomplete), []string{llmwire.LastChunk}),
		// The last 512 bytes of response.incomplete hold its usage, not
		// its status or reason.
		want: genaiWant{format: "openai_responses", provider: genai.ProviderOpenAI, operation: genai.OperationChat,
			reqModel: "gpt-4o", respModel: "gpt-4o-2024-08-06", respID: llmwire.OAIRespID, apiType: genai.OpenAIAPITypeResponses,
			input: 0, output: 0, chunks: 3},
	}, {
		name: "vLLM Responses API, type last", path: "/v1/responses",
		body:   `{"model":"Qwen/Qwen3-8B","input":"Bonjour","stream":true}`,
		writes: join([]string{llmwire.UvicornHead}, chunked(llmwire.VLLMRespCompleted), []string{llmwire.LastChunk}),
		// response.completed ends `"type":"response.completed"}`: the
		// kernel does not send its end, so its usage is not read.
		want: genaiWant{format: "openai_responses", provider: genai.ProviderOpenAI, operation: genai.OperationChat,
			reqModel: "Qwen/Qwen3-8B", respModel: "Qwen/Qwen3-8B", respID: "resp_3f1e2d4c5b6a47989a0b1c2d3e4f5a6b",
			apiType: genai.OpenAIAPITypeResponses, input: -1, output: -1, chunks: 1},
	}, {
		name: "Anthropic Messages, one event per write", path: "/v1/messages", body: anthropicBody,
		writes: join([]string{llmwire.UvicornHead}, chunked(anthropicEvents...), []string{llmwire.LastChunk}),
		want:   anthropicWant,
	}, {
		name: "llama.cpp Anthropic Messages, last events in one write", path: "/v1/messages",
		body:   `{"model":"qwen2.5-0.5b-instruct","max_tokens":32,"messages":[{"role":"user","content":"Hello"}],"stream":true}`,
		writes: join([]string{llmwire.LlamaCppHead}, chunked(llmwire.LlamaAnthStart, llmwire.LlamaAnthEnd), []string{llmwire.LastChunk}),
		// The write with message_delta ends with message_stop's
		// `"type":"message_stop"}`: not sent, so no usage and no reason.
		want: genaiWant{format: "anthropic", provider: genai.ProviderAnthropic, operation: genai.OperationChat,
			reqModel: "qwen2.5-0.5b-instruct", respModel: "qwen2.5-0.5b-instruct", respID: "chatcmpl-hG5tR2wQ8zL1",
			input: -1, output: -1, chunks: 2},
	}, {
		name: "Ollama /api/chat", path: "/api/chat",
		body:   `{"model":"llama3.2","messages":[{"role":"user","content":"why is the sky blue?"}]}`,
		writes: join([]string{llmwire.OllamaHead + llmwire.Chunked(llmwire.OllamaChatFirst)}, chunked(llmwire.OllamaChatToken, llmwire.OllamaChatFinal), []string{llmwire.LastChunk}),
		want: genaiWant{format: "ollama", provider: genai.ProviderOllama, operation: genai.OperationChat, reqModel: "llama3.2",
			respModel: "llama3.2", input: 26, output: 282, reasons: []string{"stop"}, chunks: 3},
	}, {
		name: "Ollama /api/chat, the final object in the terminator's write", path: "/api/chat",
		body: `{"model":"llama3.2","messages":[{"role":"user","content":"why is the sky blue?"}]}`,
		// A Go handler that returns without flushing its last line:
		// net/http writes it with the terminator.
		writes: join([]string{llmwire.OllamaHead + llmwire.Chunked(llmwire.OllamaChatFirst)}, chunked(llmwire.OllamaChatToken),
			[]string{llmwire.Chunked(llmwire.OllamaChatFinal) + llmwire.LastChunk}),
		want: genaiWant{format: "ollama", provider: genai.ProviderOllama, operation: genai.OperationChat, reqModel: "llama3.2",
			respModel: "llama3.2", input: 26, output: 282, reasons: []string{"stop"}, chunks: 3},
	}, {
		name: "Ollama /api/generate, final line of 2 KiB", path: "/api/generate",
		body:   `{"model":"llama3.2","prompt":"why is the sky blue?"}`,
		writes: join([]string{llmwire.OllamaHead + llmwire.Chunked(llmwire.OllamaGenFirst)}, chunked(llmwire.OllamaGenFinal), []string{llmwire.LastChunk}),
		want: genaiWant{format: "ollama", provider: genai.ProviderOllama, operation: genai.OperationTextCompletion, reqModel: "llama3.2",
			respModel: "llama3.2", input: 26, output: 259, reasons: []string{"length"}, chunks: 2},
	}, {
		name: "TGI /generate_stream with details, no model in the request", path: "/generate_stream",
		body:   `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":20,"details":true}}`,
		writes: join([]string{llmwire.TGIHead}, chunked(llmwire.TGIFirst, llmwire.TGIToken, llmwire.TGIFinal), []string{llmwire.LastChunk}),
		want: genaiWant{format: "tgi", provider: genai.ProviderHFTGI, operation: genai.OperationTextCompletion,
			input: 7, output: 20, reasons: []string{"eos_token"}, chunks: 3},
	}, {
		name: "TGI /generate_stream error", path: "/generate_stream",
		body:   `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":20}}`,
		writes: join([]string{llmwire.TGIHead}, chunked(llmwire.TGIFirst, llmwire.TGIError), []string{llmwire.LastChunk}),
		// The error event ends `"error_type":"generation"}`: not sent.
		want: genaiWant{format: "tgi", provider: genai.ProviderHFTGI, operation: genai.OperationTextCompletion,
			input: -1, output: -1, chunks: 2},
	}, {
		name: "llama.cpp /completion with timings", path: "/completion",
		body:   `{"prompt":"Building a website can be done in 10 simple steps:","n_predict":64,"stream":true}`,
		writes: join([]string{llmwire.LlamaCppHead}, chunked(llmwire.LlamaFirst, llmwire.LlamaToken, llmwire.LlamaFinal), []string{llmwire.LastChunk}),
		// The final event's model is cut off with the start of its write.
		want: genaiWant{format: "llama_cpp", provider: genai.ProviderLlamaCpp, operation: genai.OperationTextCompletion,
			input: 14, output: 64, reasons: []string{"limit"}, chunks: 3},
	}, {
		name: "a format tokenwire does not know", path: "/events",
		body:   `{"topic":"weather","messages":[{"model":"not-the-request-model"}]}`,
		writes: join([]string{llmwire.UvicornHead}, chunked("data: sunny\n\n", "data: rain\n\n", "data: {\"usage\":{\"prompt_tokens\":3}}\n\n"), []string{llmwire.LastChunk}),
		want:   genaiWant{format: "unknown", input: -1, output: -1, chunks: 3},
	}, {
		name: "vLLM chat, the model after 40 KiB of messages, read 1 KiB at a time", path: "/v1/chat/completions",
		body:   sdkBody(llmwire.VLLMChatModel, strings.Repeat("long prompt ", 40<<10/12), withUsage),
		writes: join([]string{llmwire.UvicornHead}, chunked(vllmChatEvents...), []string{llmwire.LastChunk}),
		want:   vllmChatWant, traceparent: true,
	}}
}

// serveWireCases serves every wire case on a free port: a request for
// "?case=i" gets case i's writes. The server reads 1 KiB at a time.
func serveWireCases(t *testing.T) (*teststack.WireServer, int) {
	cases := wireCases()
	wire := &teststack.WireServer{ReadSize: 1024, Respond: func(r teststack.WireRequest) teststack.WireResponse {
		_, q, _ := strings.Cut(r.Target, "?case=")
		i, _ := strconv.Atoi(q)
		return respond(cases[i].writes)
	}}
	return wire, teststack.ServeWire(t, wire)
}

// wireRequest is the JSON request of wire case i to port.
func wireRequest(t *testing.T, port, i int, c genaiCase) *http.Request {
	req, err := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d%s?case=%d", port, c.path, i), strings.NewReader(c.body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return req
}
