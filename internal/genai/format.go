package genai

// Format is the wire format a response stream was recognised as.
type Format uint8

// Formats. The zero value is FormatUnknown.
const (
	FormatUnknown Format = iota
	// FormatOpenAI: SSE "data: {json}" chunks with "object":
	// "chat.completion.chunk" or "text_completion", ended by "data: [DONE]"
	// (OpenAI, vLLM, TGI's, llama.cpp's and Ollama's /v1 routes).
	FormatOpenAI
	// FormatOpenAIResponses: the Responses API's typed SSE events
	// (response.created ... response.completed).
	FormatOpenAIResponses
	// FormatAnthropic: Anthropic Messages SSE events (message_start ...
	// message_stop).
	FormatAnthropic
	// FormatOllama: Ollama's native NDJSON (/api/chat, /api/generate).
	FormatOllama
	// FormatTGI: Hugging Face text-generation-inference /generate_stream
	// events ("data:{\"index\":..,\"token\":{..},...}").
	FormatTGI
	// FormatLlamaCpp: llama.cpp server's native /completion events.
	FormatLlamaCpp
)

// String returns the format's name, for a span attribute or a log line.
func (f Format) String() string {
	switch f {
	case FormatOpenAI:
		return "openai"
	case FormatOpenAIResponses:
		return "openai_responses"
	case FormatAnthropic:
		return "anthropic"
	case FormatOllama:
		return "ollama"
	case FormatTGI:
		return "tgi"
	case FormatLlamaCpp:
		return "llama_cpp"
	}
	return "unknown"
}

// framing says how a line carried its JSON: as an SSE "data:" field, or
// bare (NDJSON, or a tail's first line cut before its "data:").
type framing uint8

const (
	framedSSE framing = iota
	framedBare
)

// detect tells a format from one JSON value by keys that only that format
// writes at that depth, or returns FormatUnknown. The walker must be at the
// value's start. allowBare says bare lines may be SSE formats (a tail's cut
// first line); Ollama is only ever bare.
func detect(w *walker, fr framing, allowBare bool) Format {
	sse := fr == framedSSE || allowBare
	bare := fr == framedBare
	ollamaKeys := 0
	for t := w.next(); t != tokNone; t = w.next() {
		if t == tokClose {
			continue
		}
		switch {
		case w.at("object") && t == tokString:
			switch string(w.val) {
			case "chat.completion.chunk", "text_completion", "chat.completion":
				if sse {
					return FormatOpenAI
				}
			}
		case w.at("type") && t == tokString:
			if f := eventFormat(w.val); f != FormatUnknown && sse {
				return f
			}
		case w.at("token", "text"), w.at("token", "special"), w.at("details", "generated_tokens"):
			if sse {
				return FormatTGI
			}
		case w.at("stop_type"), w.at("id_slot"), w.at("tokens_predicted"):
			// llama.cpp's native events; its OpenAI-style ones have none of
			// these at the top level.
			if sse {
				return FormatLlamaCpp
			}
		case w.at("created_at") && t == tokString, w.at("done") && (t == tokTrue || t == tokFalse),
			w.at("done_reason"), w.at("eval_count"), w.at("prompt_eval_count"):
			// Two of Ollama's keys: one alone is too common a name.
			ollamaKeys++
			if bare && ollamaKeys >= 2 {
				return FormatOllama
			}
		}
	}
	return FormatUnknown
}

// eventFormat tells a format from an SSE event name or a "type" value.
func eventFormat(name []byte) Format {
	switch string(name) {
	case "message_start", "message_delta", "message_stop",
		"content_block_start", "content_block_delta", "content_block_stop", "ping":
		return FormatAnthropic
	}
	if len(name) > len("response.") && string(name[:len("response.")]) == "response." {
		return FormatOpenAIResponses
	}
	return FormatUnknown
}
