package llmwire

import (
	"strconv"
	"strings"
)

// Anthropic Messages, as Anthropic's "Streaming Messages" guide shows its
// raw HTTP stream (platform.claude.com/docs/en/build-with-claude/streaming,
// "Basic streaming request"; the guide prints the JSON with a space after
// each colon and comma, which the parser must take as well).
const (
	AnthropicDocsStart = "event: message_start\n" +
		`data: {"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant", "content": [], "model": "claude-3-5-sonnet-20241022", "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}` + "\n\n" +
		"event: ping\n" + `data: {"type": "ping"}` + "\n\n"
	AnthropicDocsDelta = "event: content_block_delta\n" + `data: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}` + "\n\n"
	AnthropicDocsEnd   = "event: content_block_stop\n" + `data: {"type": "content_block_stop", "index": 0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence":null}, "usage": {"output_tokens": 15}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type": "message_stop"}` + "\n\n"
)

// Ollama /v1/messages (ollama/ollama anthropic/anthropic.go
// StreamConverter: MessageStartEvent with MessagesResponse, whose
// stop_reason is omitempty; MessageDeltaEvent with DeltaUsage;
// middleware/anthropic.go writes "event: %s\ndata: %s\n\n").
const (
	OllamaAnthStart = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"msg_8a1c3e5f7b9d","type":"message","role":"assistant","model":"qwen3:8b","content":[],"usage":{"input_tokens":12,"output_tokens":0}}}` + "\n\n"
	OllamaAnthEnd = "event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,"output_tokens":30}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
)

// llama.cpp /v1/messages (tools/server/server-task.cpp to_json_anthropic
// of the partial and final results, server-common.cpp
// format_anthropic_sse): input_tokens excludes the cached prompt tokens,
// which cache_read_input_tokens carries.
const (
	LlamaAnthStart = "event: message_start\n" +
		`data: {"type":"message_start","message":{"id":"chatcmpl-hG5tR2wQ8zL1","type":"message","role":"assistant","content":[],"model":"qwen2.5-0.5b-instruct","stop_reason":null,"stop_sequence":null,"usage":{"cache_read_input_tokens":6,"input_tokens":11,"output_tokens":0}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n"
	LlamaAnthEnd = "event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":32}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
)

// Ollama's native NDJSON (ollama/ollama api/types.go ChatResponse,
// GenerateResponse, Message and the embedded Metrics, all omitempty;
// server/routes.go streamResponse: json.Marshal + '\n' per write, gin's
// chunked writer). Go's net/http writes the head with the first chunk.
const (
	OllamaHead = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n" +
		"Date: Wed, 04 Jun 2025 01:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n"
	OllamaChatFirst = `{"model":"llama3.2","created_at":"2025-06-04T01:00:00.123456789Z","message":{"role":"assistant","content":"The"},"done":false}` + "\n"
	OllamaChatToken = `{"model":"llama3.2","created_at":"2025-06-04T01:00:00.234567891Z","message":{"role":"assistant","content":" sky"},"done":false}` + "\n"
	OllamaChatFinal = `{"model":"llama3.2","created_at":"2025-06-04T01:00:04.987654321Z","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","total_duration":4883583458,"load_duration":1334875,"prompt_eval_count":26,"prompt_eval_duration":342546000,"eval_count":282,"eval_duration":4535599000}` + "\n"
	OllamaGenFirst  = `{"model":"llama3.2","created_at":"2025-06-04T01:01:00.111111111Z","response":"The","done":false}` + "\n"
)

// OllamaGenFinal is /api/generate's last line: done_reason and the whole
// token context come before the metrics, so its tail holds only them.
var OllamaGenFinal = func() string {
	ctx := make([]string, 300)
	for i := range ctx {
		ctx[i] = strconv.Itoa(128000 + i*7)
	}
	return `{"model":"llama3.2","created_at":"2025-06-04T01:01:03.222222222Z","response":"","done":true,"done_reason":"length","context":[` +
		strings.Join(ctx, ",") + `],"total_duration":10706818083,"load_duration":6338219291,"prompt_eval_count":26,"prompt_eval_duration":130079000,"eval_count":259,"eval_duration":4232710000}` + "\n"
}()

// TGI /generate_stream (huggingface/text-generation-inference router
// src/server.rs generate_stream_internal, src/lib.rs StreamResponse, Token,
// StreamDetails, FinishReason; top_tokens is skipped when empty, details
// only with parameters.details): axum "data:" + JSON + "\n\n".
const (
	TGIHead = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n" +
		"x-compute-type: 1-nvidia-a10g\r\nx-accel-buffering: no\r\ntransfer-encoding: chunked\r\n" +
		"date: Mon, 06 Jan 2025 10:00:00 GMT\r\n\r\n"
	TGIFirst = `data:{"index":1,"token":{"id":578,"text":" The","logprob":-0.6171875,"special":false},"generated_text":null,"details":null}` + "\n\n"
	TGIToken = `data:{"index":2,"token":{"id":4320,"text":" answer","logprob":-0.03125,"special":false},"generated_text":null,"details":null}` + "\n\n"
	TGIFinal = `data:{"index":20,"token":{"id":2,"text":"</s>","logprob":-0.021484375,"special":true},"generated_text":"The answer is that deep learning is a subset of machine learning.","details":{"finish_reason":"eos_token","generated_tokens":20,"seed":null,"input_length":7}}` + "\n\n"
	TGIError = `data:{"error":"Request failed during generation: Server error: CUDA out of memory","error_type":"generation"}` + "\n\n"
)

// llama.cpp /completion (tools/server/server-task.cpp
// server_task_result_cmpl_partial::to_json_non_oaicompat and
// server_task_result_cmpl_final::to_json_non_oaicompat, task_params
// to_json for generation_settings, stop_type_to_str, result_timings;
// "data: " + dump + "\n\n").
const (
	LlamaFirst = `data: {"index":0,"content":" Build","tokens":[],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":14}` + "\n\n"
	LlamaToken = `data: {"index":0,"content":"ing","tokens":[],"stop":false,"id_slot":0,"tokens_predicted":2,"tokens_evaluated":14}` + "\n\n"
	LlamaFinal = `data: {"index":0,"content":"","tokens":[],"id_slot":0,"stop":true,"model":"qwen2.5-0.5b-instruct","tokens_predicted":64,"tokens_evaluated":14,` +
		`"generation_settings":{"seed":4294967295,"temperature":0.800000011920929,"dynatemp_range":0.0,"dynatemp_exponent":1.0,"top_k":40,"top_p":0.949999988079071,"min_p":0.05000000074505806,"top_n_sigma":-1.0,"xtc_probability":0.0,"xtc_threshold":0.10000000149011612,"typical_p":1.0,"repeat_last_n":64,"repeat_penalty":1.0,"presence_penalty":0.0,"frequency_penalty":0.0,"dry_multiplier":0.0,"dry_base":1.75,"dry_allowed_length":2,"dry_penalty_last_n":4096,"mirostat":0,"mirostat_tau":5.0,"mirostat_eta":0.10000000149011612,"stop":[],"max_tokens":64,"n_predict":64,"n_keep":0,"n_discard":0,"ignore_eos":false,"stream":true,"n_probs":0,"min_keep":0,"chat_format":"Content-only","samplers":["penalties","dry","top_n_sigma","top_k","typ_p","top_p","min_p","xtc","temperature"],"timings_per_token":false,"post_sampling_probs":false,"lora":[]},` +
		`"prompt":"<|im_start|>user\nBuilding a website can be done in 10 simple steps:<|im_end|>\n","has_new_line":true,"truncated":false,"stop_type":"limit","stopping_word":"","tokens_cached":77,` +
		`"timings":{"cache_n":0,"prompt_n":14,"prompt_ms":18.2,"prompt_per_token_ms":1.3,"prompt_per_second":769.2307692307693,"predicted_n":64,"predicted_ms":701.9,"predicted_per_token_ms":10.9671875,"predicted_per_second":91.18108}}` + "\n\n"
)
