package genai

import (
	"slices"
	"testing"

	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// want is what a whole stream should yield.
type want struct {
	format               Format
	model, id            string
	input, output, cache int64 // -1: not known
	reasons              []string
	ended                bool
	errType              string
}

func (w want) check(t *testing.T, r *Response) {
	t.Helper()
	if r.Format != w.format {
		t.Errorf("format %v, want %v", r.Format, w.format)
	}
	if string(r.Model()) != w.model {
		t.Errorf("model %q, want %q", r.Model(), w.model)
	}
	if string(r.ID()) != w.id {
		t.Errorf("id %q, want %q", r.ID(), w.id)
	}
	checkCount(t, "input", r.Usage.Input, w.input)
	checkCount(t, "output", r.Usage.Output, w.output)
	checkCount(t, "cache read", r.Usage.CacheRead, w.cache)
	if !slices.Equal(r.FinishReasons(), w.reasons) {
		t.Errorf("finish reasons %q, want %q", r.FinishReasons(), w.reasons)
	}
	if r.Ended() != w.ended {
		t.Errorf("ended %v, want %v", r.Ended(), w.ended)
	}
	if r.ErrorType() != w.errType {
		t.Errorf("error type %q, want %q", r.ErrorType(), w.errType)
	}
}

func checkCount(t *testing.T, name string, c Count, want int64) {
	t.Helper()
	switch {
	case want < 0 && c.Known:
		t.Errorf("%s %d, want unknown", name, c.N)
	case want >= 0 && (!c.Known || c.N != want):
		t.Errorf("%s %+v, want %d", name, c, want)
	}
}

// stream is one response: its head (written alone, or with the first
// body bytes), and its body writes in order.
type stream struct {
	name   string
	head   string
	writes []string
	want   want
}

var streams = []stream{
	{
		name: "vllm chat, include_usage",
		head: llmwire.UvicornHead,
		writes: []string{llmwire.Chunked(llmwire.VLLMChatFirst), llmwire.Chunked(llmwire.VLLMChatToken), llmwire.Chunked(llmwire.VLLMChatFinish),
			llmwire.Chunked(llmwire.VLLMChatUsage), llmwire.Chunked(llmwire.SSEDone), "0\r\n\r\n"},
		want: want{FormatOpenAI, llmwire.VLLMChatModel, llmwire.VLLMChatID, 12, 28, -1, []string{"stop"}, true, ""},
	},
	{
		name:   "vllm completions",
		head:   llmwire.UvicornHead,
		writes: []string{llmwire.Chunked(llmwire.VLLMCmplToken), llmwire.Chunked(llmwire.VLLMCmplFinish), llmwire.Chunked(llmwire.VLLMCmplUsage), llmwire.Chunked(llmwire.SSEDone)},
		want:   want{FormatOpenAI, "Qwen/Qwen2.5-7B", "cmpl-5c2d4e6f8a0b4c1d9e3f5a7b9c1d3e5f", 5, 16, -1, []string{"length"}, true, ""},
	},
	{
		name:   "tgi chat",
		head:   llmwire.TGIHead,
		writes: []string{llmwire.Chunked(llmwire.TGIChatFirst), llmwire.Chunked(llmwire.TGIChatFinish), llmwire.Chunked(llmwire.TGIChatUsage), llmwire.Chunked(llmwire.TGIDone)},
		want:   want{FormatOpenAI, "meta-llama/Llama-3.1-8B-Instruct", "", 9, 20, -1, []string{"stop"}, true, ""},
	},
	{
		name:   "llama.cpp chat, several events in the last write",
		writes: []string{llmwire.Chunked(llmwire.LlamaChatFirst), llmwire.Chunked(llmwire.LlamaChatFinal)},
		// The tail of the last write starts in its usage event, after its
		// empty choices: the finish reason before it is cut off, and
		// nothing left proves the usage final.
		want: want{FormatOpenAI, "qwen2.5-0.5b-instruct", "chatcmpl-pL2kS9dQ7xV3bN1mR8tY4wZ6", 17, 9, 4, nil, false, ""},
	},
	{
		name:   "ollama openai",
		head:   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
		writes: []string{llmwire.Chunked(llmwire.OllamaOAIFirst), llmwire.Chunked(llmwire.OllamaOAIFinish), llmwire.Chunked(llmwire.OllamaOAIUsage), llmwire.Chunked(llmwire.SSEDone)},
		want:   want{FormatOpenAI, "llama3.2", "chatcmpl-392", 31, 10, -1, []string{"stop"}, true, ""},
	},
	{
		name:   "openai responses, incomplete",
		writes: []string{llmwire.OAIRespCreated, llmwire.OAIRespDelta, llmwire.OAIRespIncomplete},
		// The incomplete event is longer than a tail: its reason and status
		// are cut off, its usage is not.
		want: want{FormatOpenAIResponses, "gpt-4o-2024-08-06", llmwire.OAIRespID, 0, 0, 0, nil, true, ""},
	},
	{
		name:   "vllm responses, type last",
		writes: []string{llmwire.VLLMRespCompleted},
		want:   want{FormatOpenAIResponses, "Qwen/Qwen3-8B", "resp_3f1e2d4c5b6a47989a0b1c2d3e4f5a6b", 18, 95, 0, []string{"completed"}, true, ""},
	},
	{
		name:   "ollama responses, sorted keys",
		writes: []string{llmwire.OllamaRespCompleted},
		want:   want{FormatOpenAIResponses, "gpt-oss:20b", "resp_771234", 14, 61, 0, []string{"completed"}, true, ""},
	},
	{
		name:   "anthropic docs",
		writes: []string{llmwire.AnthropicDocsStart, llmwire.AnthropicDocsDelta, llmwire.AnthropicDocsEnd},
		want:   want{FormatAnthropic, "claude-3-5-sonnet-20241022", "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", 25, 15, -1, []string{"end_turn"}, true, ""},
	},
	{
		name:   "ollama anthropic",
		writes: []string{llmwire.Chunked(llmwire.OllamaAnthStart), llmwire.Chunked(llmwire.OllamaAnthEnd)},
		want:   want{FormatAnthropic, "qwen3:8b", "msg_8a1c3e5f7b9d", 12, 30, -1, []string{"end_turn"}, true, ""},
	},
	{
		name:   "llama.cpp anthropic, cached prompt",
		writes: []string{llmwire.Chunked(llmwire.LlamaAnthStart), llmwire.Chunked(llmwire.LlamaAnthEnd)},
		want:   want{FormatAnthropic, "qwen2.5-0.5b-instruct", "chatcmpl-hG5tR2wQ8zL1", 17, 32, 6, []string{"max_tokens"}, true, ""},
	},
	{
		name:   "ollama chat",
		head:   llmwire.OllamaHead + llmwire.Chunked(llmwire.OllamaChatFirst),
		writes: []string{llmwire.Chunked(llmwire.OllamaChatToken), llmwire.Chunked(llmwire.OllamaChatFinal), "0\r\n\r\n"},
		want:   want{FormatOllama, "llama3.2", "", 26, 282, -1, []string{"stop"}, true, ""},
	},
	{
		name:   "ollama generate, long final line",
		head:   llmwire.OllamaHead + llmwire.Chunked(llmwire.OllamaGenFirst),
		writes: []string{llmwire.Chunked(llmwire.OllamaGenFinal)},
		// The first 512 bytes hold done and done_reason, the tail the
		// metrics after the context.
		want: want{FormatOllama, "llama3.2", "", 26, 259, -1, []string{"length"}, true, ""},
	},
	{
		name:   "tgi generate_stream with details",
		head:   llmwire.TGIHead,
		writes: []string{llmwire.Chunked(llmwire.TGIFirst), llmwire.Chunked(llmwire.TGIToken), llmwire.Chunked(llmwire.TGIFinal)},
		want:   want{FormatTGI, "", "", 7, 20, -1, []string{"eos_token"}, true, ""},
	},
	{
		name:   "tgi generate_stream error",
		head:   llmwire.TGIHead,
		writes: []string{llmwire.Chunked(llmwire.TGIFirst), llmwire.Chunked(llmwire.TGIError)},
		want:   want{FormatTGI, "", "", -1, -1, -1, nil, false, "generation"},
	},
	{
		name:   "llama.cpp completion",
		writes: []string{llmwire.Chunked(llmwire.LlamaFirst), llmwire.Chunked(llmwire.LlamaToken), llmwire.Chunked(llmwire.LlamaFinal)},
		// The final event's model and tokens_* are cut off; its timings
		// are not.
		want: want{FormatLlamaCpp, "", "", 14, 64, -1, []string{"limit"}, true, ""},
	},
}

// TestStreams feeds each stream as the probe would: the first body write,
// then every write as a tail candidate (ordinary chunks included).
func TestStreams(t *testing.T) {
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			var r Response
			ParseFirst(&r, []byte(s.head), firstOf(s.writes[0]))
			for _, w := range s.writes {
				ParseTail(&r, tailOf(w))
			}
			s.want.check(t, &r)
		})
	}
}

// TestStreamsWholeWrites: with tails that hold whole writes (all of a
// short stream's events fit), nothing is cut off.
func TestStreamsWholeWrites(t *testing.T) {
	var r Response
	ParseFirst(&r, nil, []byte(llmwire.OAIRespCreated))
	ParseTail(&r, []byte(llmwire.OAIRespIncomplete))
	want{FormatOpenAIResponses, "gpt-4o-2024-08-06", llmwire.OAIRespID, 0, 0, 0, []string{"max_output_tokens"}, true, ""}.check(t, &r)

	r.Reset()
	ParseFirst(&r, nil, []byte(llmwire.Chunked(llmwire.LlamaFirst)))
	ParseTail(&r, []byte(llmwire.Chunked(llmwire.LlamaFinal)))
	want{FormatLlamaCpp, "qwen2.5-0.5b-instruct", "", 14, 64, -1, []string{"limit"}, true, ""}.check(t, &r)

	r.Reset()
	ParseFirst(&r, []byte(llmwire.OllamaHead+llmwire.Chunked(llmwire.OllamaGenFirst)), nil)
	ParseTail(&r, []byte(llmwire.Chunked(llmwire.OllamaGenFinal)))
	want{FormatOllama, "llama3.2", "", 26, 259, -1, []string{"length"}, true, ""}.check(t, &r)
}

// TestFirstBodyLost: when the first body record is lost, the format and
// the final facts come from the tails alone.
func TestFirstBodyLost(t *testing.T) {
	cases := []struct {
		tail string
		want want
	}{
		{llmwire.Chunked(llmwire.VLLMChatUsage), want{FormatOpenAI, llmwire.VLLMChatModel, llmwire.VLLMChatID, 12, 28, -1, nil, true, ""}},
		// Node's gathered write of the usage chunk, [DONE] and the terminator.
		{llmwire.Chunked(llmwire.VLLMChatUsage) + llmwire.Chunked(llmwire.SSEDone) + llmwire.LastChunk,
			want{FormatOpenAI, llmwire.VLLMChatModel, llmwire.VLLMChatID, 12, 28, -1, nil, true, ""}},
		{llmwire.Chunked(llmwire.OllamaChatFinal), want{FormatOllama, "llama3.2", "", 26, 282, -1, []string{"stop"}, true, ""}},
		{llmwire.Chunked(llmwire.OllamaGenFinal), want{FormatOllama, "", "", 26, 259, -1, nil, false, ""}},
		{llmwire.Chunked(llmwire.TGIFinal), want{FormatTGI, "", "", 7, 20, -1, []string{"eos_token"}, true, ""}},
		{llmwire.Chunked(llmwire.LlamaFinal), want{FormatLlamaCpp, "", "", 14, 64, -1, []string{"limit"}, true, ""}},
		{llmwire.Chunked(llmwire.OllamaAnthEnd), want{FormatAnthropic, "", "", 12, 30, -1, []string{"end_turn"}, true, ""}},
		{llmwire.VLLMRespCompleted, want{FormatOpenAIResponses, "", "", 18, 95, 0, []string{"completed"}, true, ""}},
	}
	for _, c := range cases {
		var r Response
		ParseTail(&r, tailOf(c.tail))
		c.want.check(t, &r)
	}
}

// TestOrdinaryChunksAsTails: a candidate that is an ordinary chunk adds
// nothing (no reason, no counts) and changes nothing already read.
func TestOrdinaryChunksAsTails(t *testing.T) {
	for _, c := range []struct{ first, chunk string }{
		{llmwire.VLLMChatFirst, llmwire.VLLMChatToken},
		{llmwire.TGIFirst, llmwire.TGIToken},
		{llmwire.AnthropicDocsStart, llmwire.AnthropicDocsDelta},
		{llmwire.OAIRespCreated, llmwire.OAIRespDelta},
	} {
		var r, before Response
		ParseFirst(&r, nil, []byte(llmwire.Chunked(c.first)))
		before = r
		ParseTail(&r, tailOf(llmwire.Chunked(c.chunk)))
		if r != before {
			t.Errorf("%.40q changed the response:\n%+v\n%+v", c.chunk, before, r)
		}
	}
}

// TestUnknownFormat: bytes of no known format yield FormatUnknown and
// nothing else.
func TestUnknownFormat(t *testing.T) {
	for _, c := range []struct {
		head, body string
		tailToo    bool
	}{
		{llmwire.UvicornHead, "data: hello\n\n", true},
		{llmwire.UvicornHead, `data: {"msg":"hi","model":"x","usage":{"prompt_tokens":3}}` + "\n\n", true},
		{llmwire.OllamaHead, `{"model":"x","eval_count":3}` + "\n", true}, // one Ollama key is not enough
		{"", "\x00\x01\x02binary}}", true},
		// SSE under an NDJSON head, and NDJSON under an SSE head.
		{llmwire.OllamaHead, `data: {"object":"chat.completion.chunk","model":"x"}` + "\n\n", false},
		{llmwire.UvicornHead, llmwire.OllamaChatFirst, false},
	} {
		var r Response
		ParseFirst(&r, []byte(c.head), []byte(c.body))
		if c.tailToo {
			ParseTail(&r, []byte(c.body))
		}
		if r != (Response{}) {
			t.Errorf("%q: %+v", c.body, r)
		}
	}
}

// TestFirstBodyCutAnywhere: a first body cut at any byte never yields a
// wrong value, only fewer values.
func TestFirstBodyCutAnywhere(t *testing.T) {
	full := llmwire.Chunked(llmwire.VLLMChatFirst)
	for n := 0; n <= len(full); n++ {
		var r Response
		ParseFirst(&r, []byte(llmwire.UvicornHead), []byte(full[:n]))
		if m := string(r.Model()); m != "" && m != llmwire.VLLMChatModel {
			t.Fatalf("cut at %d: model %q", n, m)
		}
		if id := string(r.ID()); id != "" && id != llmwire.VLLMChatID {
			t.Fatalf("cut at %d: id %q", n, id)
		}
	}
}

// TestTailCutAnywhere: a tail starting at any byte of a final event never
// yields a wrong value: each is the true one or unknown.
func TestTailCutAnywhere(t *testing.T) {
	for _, s := range []struct {
		write string
		want  want
	}{
		{llmwire.Chunked(llmwire.VLLMChatUsage), want{model: llmwire.VLLMChatModel, id: llmwire.VLLMChatID, input: 12, output: 28}},
		{llmwire.Chunked(llmwire.OllamaChatFinal), want{model: "llama3.2", input: 26, output: 282, reasons: []string{"stop"}}},
		{llmwire.Chunked(llmwire.LlamaFinal), want{model: "qwen2.5-0.5b-instruct", input: 14, output: 64, reasons: []string{"limit"}}},
		{llmwire.AnthropicDocsEnd, want{input: -1, output: 15, reasons: []string{"end_turn"}}},
		{llmwire.OAIRespIncomplete, want{model: "gpt-4o-2024-08-06", id: llmwire.OAIRespID, input: 0, output: 0, reasons: []string{"max_output_tokens"}}},
	} {
		var first Response
		ParseFirst(&first, nil, []byte(s.write)) // to learn the format
		for n := 0; n < len(s.write); n++ {
			r := Response{Format: first.Format}
			ParseTail(&r, []byte(s.write[n:]))
			if m := string(r.Model()); m != "" && m != s.want.model {
				t.Fatalf("%.30q from %d: model %q", s.write, n, m)
			}
			if id := string(r.ID()); id != "" && id != s.want.id {
				t.Fatalf("%.30q from %d: id %q", s.write, n, id)
			}
			if r.Usage.Input.Known && r.Usage.Input.N != s.want.input || r.Usage.Output.Known && r.Usage.Output.N != s.want.output {
				t.Fatalf("%.30q from %d: usage %+v", s.write, n, r.Usage)
			}
			if got := r.FinishReasons(); got != nil && !slices.Equal(got, s.want.reasons) {
				t.Fatalf("%.30q from %d: reasons %q", s.write, n, got)
			}
		}
	}
}

// TestChoicesAndErrors: finish reasons per choice index, in either key
// order, and the error each format reports mid-stream.
func TestChoicesAndErrors(t *testing.T) {
	var r Response
	// Two choices (n=2) finishing in separate chunks, vLLM's order
	// (index before finish_reason) and llama.cpp's (after).
	ParseFirst(&r, nil, []byte(llmwire.Chunked(llmwire.VLLMChatFirst)))
	ParseTail(&r, []byte(llmwire.VLLMPrefix+`"choices":[{"index":1,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]}`+"\n\n"))
	ParseTail(&r, []byte(`data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"object":"chat.completion.chunk"}`+"\n\n"))
	if got := r.FinishReasons(); !slices.Equal(got, []string{"length", "stop"}) {
		t.Errorf("choices: %q", got)
	}

	for _, c := range []struct {
		head, first, tail, want string
	}{
		// Anthropic's error event (Messages streaming docs, "Error events").
		{"", llmwire.AnthropicDocsStart, "event: error\n" + `data: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}` + "\n\n", "overloaded_error"},
		// A Responses error event (prism-php/prism's OpenAI fixture
		// stream-unknown-error-responses-1.json).
		{"", llmwire.OAIRespCreated, "event: error\n" + `data: {"type":"error","sequence_number":2,"error":{"code":"unknown-error","message":"Foobar","param":null}}` + "\n\n", "unknown-error"},
		// vLLM's streaming error (serving.py create_streaming_error_response:
		// an ErrorResponse, whose error has message, type, param, code).
		{llmwire.UvicornHead, llmwire.Chunked(llmwire.VLLMChatFirst), `data: {"error":{"message":"The decoder prompt is too long","type":"BadRequestError","param":null,"code":400}}` + "\n\n", "BadRequestError"},
		// Ollama's (routes.go streamResponse: {"error": message}).
		{llmwire.OllamaHead, llmwire.Chunked(llmwire.OllamaChatFirst), `{"error":"an error was encountered while running the model: unexpected EOF"}` + "\n", ErrorTypeOther},
	} {
		r.Reset()
		ParseFirst(&r, []byte(c.head), []byte(c.first))
		ParseTail(&r, []byte(c.tail))
		if r.ErrorType() != c.want {
			t.Errorf("%.30q: error type %q, want %q", c.tail, r.ErrorType(), c.want)
		}
	}
}
