package llmwire

import (
	"fmt"
	"strings"
)

// Fixtures: bytes exactly as each server writes them, built from its
// source (field order, separators, framing), not from memory. Each names
// where it comes from. Ids and timestamps are made up in the servers'
// shapes; counts are consistent with each other.

// Chunked frames one write's data as an HTTP/1.1 chunk, as uvicorn (h11,
// httptools), Go's net/http, hyper and cpp-httplib each write it: size in
// lower-case hex, CRLF, data, CRLF, in one write.
func Chunked(data string) string {
	return fmt.Sprintf("%x\r\n%s\r\n", len(data), data)
}

// UvicornHead is the head Starlette's StreamingResponse(media_type=
// "text/event-stream") gets from uvicorn, written on its own.
const UvicornHead = "HTTP/1.1 200 OK\r\ndate: Mon, 10 Jun 2024 06:13:20 GMT\r\nserver: uvicorn\r\n" +
	"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"

// vLLM /v1/chat/completions (vllm-project/vllm
// vllm/entrypoints/openai/chat_completion/serving.py
// chat_completion_stream_generator, protocol.py ChatCompletionStreamResponse
// and ChatCompletionResponseStreamChoice, engine protocol UsageInfo field
// order prompt_tokens, total_tokens, completion_tokens): each chunk is
// model_dump_json(exclude_unset=True) in "data: %s\n\n"; the first sets
// prompt_token_ids and prompt_text explicitly (to null), token chunks set
// token_ids, the finish chunk stop_reason; the usage chunk
// (stream_options.include_usage) adds exclude_none; then "data: [DONE]".
const (
	VLLMChatID    = "chatcmpl-8f3b2c1d9e4a4b7f8c6d5e4f3a2b1c0d"
	VLLMChatModel = "meta-llama/Llama-3.1-8B-Instruct"
	VLLMPrefix    = `data: {"id":"` + VLLMChatID + `","object":"chat.completion.chunk","created":1718000000,"model":"` + VLLMChatModel + `",`

	VLLMChatFirst  = VLLMPrefix + `"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}` + "\n\n"
	VLLMChatToken  = VLLMPrefix + `"choices":[{"index":0,"delta":{"content":" Paris"},"logprobs":null,"finish_reason":null,"token_ids":null}]}` + "\n\n"
	VLLMChatFinish = VLLMPrefix + `"choices":[{"index":0,"delta":{"content":"."},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]}` + "\n\n"
	VLLMChatUsage  = VLLMPrefix + `"choices":[],"usage":{"prompt_tokens":12,"total_tokens":40,"completion_tokens":28}}` + "\n\n"
	SSEDone        = "data: [DONE]\n\n"
)

// vLLM /v1/completions (completion/serving.py completion_stream_generator,
// completion/protocol.py CompletionResponseStreamChoice): token chunks set
// every choice field explicitly; the usage chunk is dumped with
// exclude_unset=False, exclude_none=True.
const (
	VLLMCmplPrefix = `data: {"id":"cmpl-5c2d4e6f8a0b4c1d9e3f5a7b9c1d3e5f","object":"text_completion","created":1718000100,"model":"Qwen/Qwen2.5-7B","choices":[`
	VLLMCmplToken  = VLLMCmplPrefix + `{"index":0,"text":" world","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}` + "\n\n"
	VLLMCmplFinish = VLLMCmplPrefix + `{"index":0,"text":"!","logprobs":null,"finish_reason":"length","stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}` + "\n\n"
	VLLMCmplUsage  = VLLMCmplPrefix + `],"usage":{"prompt_tokens":5,"total_tokens":21,"completion_tokens":16}}` + "\n\n"
)

// TGI /v1/chat/completions (huggingface/text-generation-inference router
// src/server.rs chat_completions, src/chat.rs ChatState::push, src/lib.rs
// CompletionType, internally tagged by "object", ChatCompletionChunk with
// an empty id, Usage): axum writes Event::json_data as "data:" + JSON +
// "\n\n", no space; the stream ends with Event::data("[DONE]").
const (
	TGIChatPrefix = `data:{"object":"chat.completion.chunk","id":"","created":1736000000,"model":"meta-llama/Llama-3.1-8B-Instruct","system_fingerprint":"3.3.6-native","choices":[`
	TGIChatFirst  = TGIChatPrefix + `{"index":0,"delta":{"role":"assistant","content":"Deep"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"
	TGIChatFinish = TGIChatPrefix + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":"stop"}],"usage":null}` + "\n\n"
	TGIChatUsage  = TGIChatPrefix + `],"usage":{"prompt_tokens":9,"completion_tokens":20,"total_tokens":29}}` + "\n\n"
	TGIDone       = "data:[DONE]\n\n"
)

// llama.cpp /v1/chat/completions (ggml-org/llama.cpp tools/server
// server-task.cpp to_json_oaicompat_chat and _stream, usage_json_oaicompat,
// result_timings::to_json; server-common.cpp format_oai_sse): nlohmann
// ordered_json, choices first; the final result is an array written as
// several events in one write, the last with the usage and the timings.
const (
	LlamaChatTail  = `","model":"qwen2.5-0.5b-instruct","system_fingerprint":"b5600-3ac67535","object":"chat.completion.chunk"`
	LlamaChatFirst = `data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1749000000,"id":"chatcmpl-pL2kS9dQ7xV3bN1mR8tY4wZ6` + LlamaChatTail + "}\n\n"
	LlamaChatFinal = `data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" today?"}}],"created":1749000001,"id":"chatcmpl-pL2kS9dQ7xV3bN1mR8tY4wZ6` + LlamaChatTail + "}\n\n" +
		`data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1749000001,"id":"chatcmpl-pL2kS9dQ7xV3bN1mR8tY4wZ6` + LlamaChatTail + "}\n\n" +
		`data: {"choices":[],"created":1749000001,"id":"chatcmpl-pL2kS9dQ7xV3bN1mR8tY4wZ6` + LlamaChatTail +
		`,"usage":{"completion_tokens":9,"prompt_tokens":17,"total_tokens":26,"prompt_tokens_details":{"cached_tokens":4}},` +
		`"timings":{"cache_n":4,"prompt_n":13,"prompt_ms":21.5,"prompt_per_token_ms":1.6538461538461537,"prompt_per_second":604.6511627906976,"predicted_n":9,"predicted_ms":88.2,"predicted_per_token_ms":9.8,"predicted_per_second":102.04081632653062}}` + "\n\n"
)

// Ollama /v1/chat/completions (ollama/ollama openai/openai.go
// ChatCompletionChunk, ChunkChoice, Delta with omitempty fields, Usage;
// middleware/openai.go writes "data: %s\n\n" and "data: [DONE]\n\n").
const (
	OllamaOAIPrefix = `data: {"id":"chatcmpl-392","object":"chat.completion.chunk","created":1749000500,"model":"llama3.2","system_fingerprint":"fp_ollama","choices":[`
	OllamaOAIFirst  = OllamaOAIPrefix + `{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}` + "\n\n"
	OllamaOAIFinish = OllamaOAIPrefix + `{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	OllamaOAIUsage  = OllamaOAIPrefix + `],"usage":{"prompt_tokens":31,"completion_tokens":10,"total_tokens":41}}` + "\n\n"
)

// OpenAI's own Responses API, as recorded from api.openai.com/v1/responses
// (DataDog/dd-trace-py tests/contrib/openai/cassettes/v1/
// response_stream_incomplete.yaml; YAML line folding undone): "type" and
// "sequence_number" first, the response object last; max_output_tokens
// ended it with response.incomplete.
const (
	OAIRespID      = "resp_6866d2dec420819c92534dcf75e475120847a84b87aad89c"
	OAIRespMsgID   = "msg_6866d2df1c0c819c885ca369ba853e7f0847a84b87aad89c"
	OAIRespText    = "In the bustling city of Detroit, a sleek, metallic blue sedan rolled off the"
	OAIRespCreated = "event: response.created\n" +
		`data: {"type":"response.created","sequence_number":0,"response":{"id":"` + OAIRespID + `","object":"response","created_at":1751569118,"status":"in_progress","background":false,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":16,"max_tool_calls":null,"model":"gpt-4o-2024-08-06","output":[],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"service_tier":"auto","store":false,"temperature":0.1,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_logprobs":0,"top_p":1.0,"truncation":"disabled","usage":null,"user":null,"metadata":{}}}` + "\n\n"
	OAIRespDelta = "event: response.output_text.delta\n" +
		`data: {"type":"response.output_text.delta","sequence_number":4,"item_id":"` + OAIRespMsgID + `","output_index":0,"content_index":0,"delta":"In","logprobs":[]}` + "\n\n"
	OAIRespIncomplete = "event: response.incomplete\n" +
		`data: {"type":"response.incomplete","sequence_number":23,"response":{"id":"` + OAIRespID + `","object":"response","created_at":1751569118,"status":"incomplete","background":false,"error":null,"incomplete_details":{"reason":"max_output_tokens"},"instructions":null,"max_output_tokens":16,"max_tool_calls":null,"model":"gpt-4o-2024-08-06","output":[{"id":"` + OAIRespMsgID + `","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"` + OAIRespText + `"}],"role":"assistant"}],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"service_tier":"default","store":false,"temperature":0.1,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_logprobs":0,"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0},"user":null,"metadata":{}}}` + "\n\n"
)

// vLLM /v1/responses (vllm/entrypoints/openai/responses/protocol.py
// ResponsesResponse, ResponseUsage, InputTokensDetails,
// OutputTokensDetails; the events subclass openai-python's, whose fields
// are response, sequence_number, type; api_router.py writes "event:
// {type}\ndata: {model_dump_json(indent=None)}\n\n"). "type" comes last.
var VLLMRespCompleted = "event: response.completed\n" +
	`data: {"response":{"id":"resp_3f1e2d4c5b6a47989a0b1c2d3e4f5a6b","created_at":1749001000,"incomplete_details":null,"instructions":null,"metadata":null,"model":"Qwen/Qwen3-8B","object":"response","output":[{"id":"msg_9b8a7c6d5e4f4a3b","content":[{"annotations":[],"text":"` +
	strings.Repeat("Bonjour ", 40) + `","type":"output_text","logprobs":null}],"role":"assistant","status":"completed","type":"message"}],"parallel_tool_calls":true,"temperature":0.7,"tool_choice":"auto","tools":[],"top_p":0.8,"background":false,"max_output_tokens":32000,"max_tool_calls":null,"previous_response_id":null,"prompt":null,"reasoning":null,"service_tier":"auto","status":"completed","text":null,"top_logprobs":null,"truncation":"disabled",` +
	`"usage":{"input_tokens":18,"input_tokens_details":{"cached_tokens":0,"input_tokens_per_turn":[],"cached_tokens_per_turn":[]},"output_tokens":95,"output_tokens_details":{"reasoning_tokens":0,"tool_output_tokens":0,"output_tokens_per_turn":[],"tool_output_tokens_per_turn":[]},"total_tokens":113},"user":null,"input_messages":null,"output_messages":null},"sequence_number":42,"type":"response.completed"}` + "\n\n"

// Ollama /v1/responses (openai/responses.go ResponsesStreamConverter:
// newEvent and buildResponseObject build map[string]any, which Go's
// encoding/json writes with sorted keys; processCompletion's usage).
var OllamaRespCompleted = "event: response.completed\n" +
	`data: {"response":{"background":false,"completed_at":1749002001,"created_at":1749002000,"error":null,"frequency_penalty":0,"id":"resp_771234","incomplete_details":null,"instructions":null,"max_output_tokens":null,"max_tool_calls":null,"metadata":{},"model":"gpt-oss:20b","object":"response","output":[{"content":[{"annotations":[],"logprobs":[],"text":"` +
	strings.Repeat("ok ", 60) + `","type":"output_text"}],"id":"msg_771234","role":"assistant","status":"completed","type":"message"}],"parallel_tool_calls":true,"presence_penalty":0,"previous_response_id":null,"prompt_cache_key":null,"reasoning":null,"safety_identifier":null,"service_tier":"default","status":"completed","store":false,"temperature":1,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_logprobs":0,"top_p":1,"truncation":"disabled",` +
	`"usage":{"input_tokens":14,"input_tokens_details":{"cached_tokens":0},"output_tokens":61,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":75}},"sequence_number":9,"type":"response.completed"}` + "\n\n"
