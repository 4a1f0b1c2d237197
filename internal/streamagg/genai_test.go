package streamagg

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// first and tail cut a write as the kernel does for a BODY record.
var first, tail = streamaggtest.FirstOf, streamaggtest.TailOf

// sdkChat is a chat completions request as the OpenAI Python SDK sends
// it: the messages first, the model after them, with pad bytes of
// messages and extra headers before the traceparent.
func sdkChat(path, model string, messageBytes, headerBytes int, traceparent string) string {
	body, _ := json.Marshal(map[string]any{
		"messages": []map[string]string{{"role": "user", "content": strings.Repeat("a", messageBytes)}},
	})
	tailJSON := `,"model":"` + model + `","stream":true,"stream_options":{"include_usage":true}}`
	b := string(body[:len(body)-1]) + tailJSON
	head := "POST " + path + " HTTP/1.1\r\nHost: x\r\n"
	for i := 0; i < headerBytes; i += 40 {
		head += fmt.Sprintf("X-Stainless-Pad-%04d: %s\r\n", i/40, strings.Repeat("p", 16))
	}
	if traceparent != "" {
		head += "traceparent: " + traceparent + "\r\n"
	}
	return head + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(b)) + b
}

const goldenTraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// vllmStream is vLLM's chat stream with stream_options.include_usage as
// the kernel reports it: the first event's start, and the usage chunk's
// end (the only one of its writes that ends like a last event).
func vllmStream(req string) streamaggtest.Stream {
	return streamaggtest.Stream{Request: req, RequestSlice: stream.RequestSlice,
		Head: llmwire.UvicornHead, HeadBytes: uint32(len(llmwire.UvicornHead)), HeadAt: 2,
		ChunkAt: []uint64{40, 60, 80, 100}, ChunkBytes: 300,
		FirstBody: first(llmwire.Chunked(llmwire.VLLMChatFirst)),
		Tails:     []string{tail(llmwire.Chunked(llmwire.VLLMChatUsage))}}
}

// The request's model after 40 KiB of messages, its traceparent after
// 6 KiB of headers, both in 4 KiB slices; the response's model, id,
// format and final usage; metrics and span carry each where it belongs.
func TestGenAIFromRequestAndResponse(t *testing.T) {
	h := newHarness(testConfig())
	h.run(vllmStream(sdkChat("/v1/chat/completions", llmwire.VLLMChatModel, 40<<10, 6<<10, goldenTraceParent)))

	snap := h.a.Snapshot()
	require.Len(t, snap, 1)
	k, s := snap[0].Key, snap[0].Series
	require.Equal(t, SeriesKey{PID: h.pid, Port: streamaggtest.Server.Port(), Method: "POST", Route: "/v1/chat/completions",
		Model: llmwire.VLLMChatModel, Mode: ModeHTTP, Operation: genai.OperationChat, Provider: genai.ProviderOpenAI,
		ResponseModel: llmwire.VLLMChatModel, Format: genai.FormatOpenAI}, k)
	require.EqualValues(t, 1, s.InputTokens.Count)
	require.EqualValues(t, 12, s.InputTokens.Sum)
	require.EqualValues(t, 1, s.OutputTokens.Count)
	require.EqualValues(t, 28, s.OutputTokens.Sum)
	// Request at 1 s, first chunk at +40 ms, end 1 ms after the last
	// chunk (+101 ms): (0.101 - 0.040) / (28 - 1).
	require.EqualValues(t, 1, s.TPOT.Count)
	require.InDelta(t, (0.101-0.040)/27, s.TPOT.Sum, 1e-12)

	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 1)
	sp := spans[0]
	require.True(t, sp.TraceParent.Valid, "the traceparent after 6 KiB of headers")
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", fmt.Sprintf("%x", sp.TraceParent.TraceID))
	require.Equal(t, llmwire.VLLMChatModel, sp.Model)
	require.Equal(t, llmwire.VLLMChatModel, sp.ResponseModel)
	require.Equal(t, llmwire.VLLMChatID, sp.ResponseID)
	require.Equal(t, genai.OperationChat, sp.Operation)
	require.Equal(t, genai.ProviderOpenAI, sp.Provider)
	require.Equal(t, genai.OpenAIAPITypeChatCompletions, sp.APIType)
	require.Equal(t, genai.Count{N: 12, Known: true}, sp.Usage.Input)
	require.Equal(t, genai.Count{N: 28, Known: true}, sp.Usage.Output)
	require.True(t, sp.Stream && sp.StreamKnown)
	require.Empty(t, sp.FinishReasons, "the finish chunk was not a tail the kernel sent")
	require.Empty(t, sp.ErrorType)
	require.False(t, sp.Failed)
}

// A configured provider wins over the one the format speaks for, on
// metrics and spans, and names opaque streams' too.
func TestConfiguredProvider(t *testing.T) {
	cfg := testConfig()
	cfg.Providers = map[uint16]string{streamaggtest.Server.Port(): "vllm"}
	h := newHarness(cfg)
	h.run(vllmStream(sdkChat("/v1/chat/completions", "m", 10, 0, "")))
	opaque := streamaggtest.Stream{Seq: 2, Request: "\x16\x03\x01", Head: "\x17\x03\x03", HeadBytes: 5, HeadAt: 1,
		ChunkAt: []uint64{2, 3}, ChunkBytes: 2, FirstBody: "\x17\x03\x03\x00\x10"}
	h.run(opaque)
	snap := h.a.Snapshot()
	require.Len(t, snap, 2)
	for _, s := range snap {
		require.Equal(t, "vllm", s.Key.Provider, "%+v", s.Key)
	}
	for _, sp := range h.a.TakeSpans(nil) {
		require.Equal(t, "vllm", sp.Provider)
	}
}

// A stream in no format tokenwire knows, on an endpoint it does not know,
// is measured like any other and carries no GenAI attribute it cannot
// prove; a request without a model has no gen_ai.request.model.
func TestUnknownFormatAndNoModel(t *testing.T) {
	h := newHarness(testConfig())
	h.run(streamaggtest.Stream{Request: "POST /events HTTP/1.1\r\n\r\n{\"topic\":\"x\",\"messages\":[{\"model\":\"not-this\"}]}",
		Head: sseHead, HeadBytes: uint32(len(sseHead)), HeadAt: 1, ChunkAt: []uint64{10, 20, 30}, ChunkBytes: 9,
		FirstBody: "d\r\ndata: hello\n\n\r\n", Tails: []string{"data: {\"n\":1,\"usage\":{\"prompt_tokens\":3}}\n\n"}})
	snap := h.a.Snapshot()
	require.Len(t, snap, 1)
	require.Equal(t, SeriesKey{PID: h.pid, Port: streamaggtest.Server.Port(), Method: "POST", Route: "/events", Mode: ModeHTTP,
		Format: genai.FormatUnknown}, snap[0].Key)
	require.EqualValues(t, 3, snap[0].Chunks)
	require.EqualValues(t, 1, snap[0].TTFT.Count)
	require.Zero(t, snap[0].InputTokens.Count+snap[0].OutputTokens.Count+snap[0].TPOT.Count)
	sp := h.a.TakeSpans(nil)[0]
	require.Empty(t, sp.Model+sp.ResponseModel+sp.Operation+sp.Provider+sp.APIType)
	require.Equal(t, genai.Usage{}, sp.Usage)
}

// Counts the stream did not report as final are not recorded: Anthropic's
// message_start names the input tokens, but without its message_delta and
// message_stop nothing says the stream is over.
func TestUsageOnlyWhenTheStreamEnded(t *testing.T) {
	h := newHarness(testConfig())
	h.run(streamaggtest.Stream{Request: "POST /v1/messages HTTP/1.1\r\n\r\n{\"model\":\"claude\",\"stream\":true}",
		Head: sseHead, HeadBytes: uint32(len(sseHead)), HeadAt: 1, ChunkAt: []uint64{10, 20}, ChunkBytes: 40,
		FirstBody: first(llmwire.Chunked(llmwire.AnthropicDocsStart))})
	s := h.a.Snapshot()[0]
	require.Equal(t, genai.FormatAnthropic, s.Key.Format)
	require.Equal(t, genai.ProviderAnthropic, s.Key.Provider)
	require.Zero(t, s.InputTokens.Count)
	sp := h.a.TakeSpans(nil)[0]
	require.False(t, sp.Usage.Input.Known, "input tokens of a stream that did not say it ended")
	require.Equal(t, "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", sp.ResponseID)
}

// A stream that ended in an error: its duration goes to the error's
// series point, it has no time per output token, and its span says so.
func TestErrorType(t *testing.T) {
	h := newHarness(testConfig())
	tgi := func(seq uint32, head string, tails ...string) streamaggtest.Stream {
		return streamaggtest.Stream{Seq: seq, Request: "POST /generate_stream HTTP/1.1\r\n\r\n{\"inputs\":\"hi\",\"parameters\":{\"details\":true}}",
			Head: head, HeadBytes: uint32(len(head)), HeadAt: 1, ChunkAt: []uint64{10, 20, 30}, ChunkBytes: 100,
			FirstBody: first(llmwire.Chunked(llmwire.TGIFirst)), Tails: tails}
	}
	h.run(tgi(1, llmwire.TGIHead, tail(llmwire.Chunked(llmwire.TGIFinal))))
	h.run(tgi(2, llmwire.TGIHead, tail(llmwire.Chunked(llmwire.TGIError))))
	failed := strings.Replace(llmwire.TGIHead, "200 OK", "500 Internal Server Error", 1)
	h.run(tgi(3, failed))

	snap := h.a.Snapshot()
	require.Len(t, snap, 1, "the error is not in the series key: the key is fixed before the stream ends")
	s := snap[0].Series
	require.Equal(t, "", snap[0].Key.Model, "TGI's native request names no model")
	require.Equal(t, genai.ProviderHFTGI, snap[0].Key.Provider)
	require.Equal(t, genai.OperationTextCompletion, snap[0].Key.Operation)
	require.EqualValues(t, 3, s.TTFT.Count)
	require.EqualValues(t, 1, s.Duration.Count)
	require.Equal(t, []string{"generation", "500"}, []string{s.Errors[0].Type, s.Errors[1].Type})
	require.EqualValues(t, 1, s.Errors[0].Duration.Count)
	require.EqualValues(t, 1, s.Errors[1].Duration.Count)
	require.EqualValues(t, 1, s.TPOT.Count, "only the stream that finished")
	require.EqualValues(t, 20, s.OutputTokens.Sum)
	require.EqualValues(t, 7, s.InputTokens.Sum)

	spans := h.a.TakeSpans(nil)
	require.Equal(t, []string{"eos_token"}, spans[0].FinishReasons)
	require.Equal(t, "", spans[0].ErrorType)
	require.Equal(t, "generation", spans[1].ErrorType)
	require.True(t, spans[1].Failed)
	require.Equal(t, "500", spans[2].ErrorType)
	require.True(t, spans[2].Failed)
}

// The series key is fixed at the stream's first chunk: a response model
// only a later event names is on the span, not on the metrics.
func TestResponseModelFixedAtFirstChunk(t *testing.T) {
	h := newHarness(testConfig())
	recs := streamaggtest.Stream{Request: "POST /api/chat HTTP/1.1\r\n\r\n{\"model\":\"llama3.2:latest\"}",
		Head: llmwire.OllamaHead, HeadBytes: uint32(len(llmwire.OllamaHead)), HeadAt: 1, ChunkAt: []uint64{10, 20},
		ChunkBytes: 100, Tails: []string{tail(llmwire.Chunked(llmwire.OllamaChatFinal))}}.Records(IntervalBounds)
	// The first body record was lost; a PROGRESS at the first chunk
	// classifies the stream before the tail arrives.
	progress := recs[len(recs)-1]
	progress.Kind = stream.KindProgress
	h.a.Add(&recs[0])
	h.a.Add(&recs[1])
	h.a.Add(&progress)
	for i := 2; i < len(recs); i++ {
		h.a.Add(&recs[i])
	}
	k := h.a.Snapshot()[0].Key
	require.Equal(t, "llama3.2:latest", k.Model)
	require.Equal(t, "", k.ResponseModel)
	require.Equal(t, genai.FormatUnknown, k.Format)
	require.Equal(t, "", k.Provider)
	sp := h.a.TakeSpans(nil)[0]
	require.Equal(t, "llama3.2", sp.ResponseModel)
	require.Equal(t, genai.FormatOllama, sp.Format)
	require.Equal(t, genai.ProviderOllama, sp.Provider)
	require.Equal(t, []string{"stop"}, sp.FinishReasons)
	require.EqualValues(t, 282, sp.Usage.Output.N)
	s := h.a.Snapshot()[0].Series
	require.EqualValues(t, 282, s.OutputTokens.Sum, "the usage is final: it counts")
}

// Error types beyond the cap are _OTHER, the conventions' fallback.
func TestErrorTypesAreCapped(t *testing.T) {
	a := mustNew(testConfig())
	for i := range maxErrorTypes + 5 {
		got := a.errTypes.getString(fmt.Sprintf("e%d", i), 0)
		if i < maxErrorTypes {
			require.Equal(t, fmt.Sprintf("e%d", i), got)
		} else {
			require.Equal(t, genai.ErrorTypeOther, got)
		}
	}
}
