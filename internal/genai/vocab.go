package genai

import "sync"

// maxToken bounds a finish reason or error type read from the wire.
const maxToken = 48

// maxInterned bounds the distinct unknown finish reasons and error types
// kept process-wide; beyond it they are reported as ErrorTypeOther, so a
// hostile stream cannot grow memory or attribute cardinality.
const maxInterned = 64

// reason returns a finish reason read from the wire as a string that is
// allocated at most once per distinct value: the servers' own vocabulary
// as constants, other well-formed values interned up to maxInterned, and
// anything else as ErrorTypeOther. Values are reported as the server wrote
// them (the conventions' examples are OpenAI's, but Anthropic's end_turn
// or TGI's eos_token are what those APIs mean, and renaming them would
// lose that).
func reason(b []byte) string {
	switch string(b) {
	// OpenAI chat/completions (and vLLM, TGI, llama.cpp, Ollama /v1).
	case "stop":
		return "stop"
	case "length":
		return "length"
	case "tool_calls":
		return "tool_calls"
	case "content_filter":
		return "content_filter"
	case "function_call":
		return "function_call"
	// vLLM.
	case "abort":
		return "abort"
	case "error":
		return "error"
	// Anthropic Messages.
	case "end_turn":
		return "end_turn"
	case "max_tokens":
		return "max_tokens"
	case "stop_sequence":
		return "stop_sequence"
	case "tool_use":
		return "tool_use"
	case "pause_turn":
		return "pause_turn"
	case "refusal":
		return "refusal"
	case "model_context_window_exceeded":
		return "model_context_window_exceeded"
	// OpenAI Responses: terminal statuses and incomplete reasons.
	case "completed":
		return "completed"
	case "incomplete":
		return "incomplete"
	case "failed":
		return "failed"
	case "cancelled":
		return "cancelled"
	case "max_output_tokens":
		return "max_output_tokens"
	// Ollama done_reason.
	case "load":
		return "load"
	case "unload":
		return "unload"
	// TGI.
	case "eos_token":
		return "eos_token"
	// llama.cpp stop_type.
	case "eos":
		return "eos"
	case "limit":
		return "limit"
	case "word":
		return "word"
	}
	return interned(b)
}

// errorType returns an error type read from the wire (see reason).
func errorType(b []byte) string {
	switch string(b) {
	// Anthropic.
	case "overloaded_error":
		return "overloaded_error"
	case "api_error":
		return "api_error"
	case "invalid_request_error":
		return "invalid_request_error"
	case "rate_limit_error":
		return "rate_limit_error"
	case "authentication_error":
		return "authentication_error"
	case "permission_error":
		return "permission_error"
	case "not_found_error":
		return "not_found_error"
	case "request_too_large":
		return "request_too_large"
	case "timeout_error":
		return "timeout_error"
	// OpenAI, llama.cpp.
	case "server_error":
		return "server_error"
	case "rate_limit_exceeded":
		return "rate_limit_exceeded"
	// TGI.
	case "generation":
		return "generation"
	case "overloaded":
		return "overloaded"
	case "validation":
		return "validation"
	case "incomplete_generation":
		return "incomplete_generation"
	// vLLM.
	case "BadRequestError":
		return "BadRequestError"
	case "InternalServerError":
		return "InternalServerError"
	}
	return interned(b)
}

var internTable = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// interned returns b as a string, allocated once per distinct value and
// kept for the process's life, or ErrorTypeOther when b is not a plausible
// code (printable word characters, up to maxToken) or the table is full.
func interned(b []byte) string {
	if !isCode(b) {
		return ErrorTypeOther
	}
	internTable.Lock()
	defer internTable.Unlock()
	if s, ok := internTable.m[string(b)]; ok {
		return s
	}
	if len(internTable.m) >= maxInterned {
		return ErrorTypeOther
	}
	s := string(b)
	internTable.m[s] = s
	return s
}

// isCode reports whether b looks like an enum value: 1 to maxToken
// letters, digits, '_', '-', '.' or ':'.
func isCode(b []byte) bool {
	if len(b) == 0 || len(b) > maxToken {
		return false
	}
	for _, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.' || c == ':') {
			return false
		}
	}
	return true
}

// copyValue copies a JSON string's raw bytes into dst if they make a
// printable ASCII value that fits, decoding the escapes a name can need
// (\/, \\, \"); it returns the length copied, or -1 (dst unchanged in
// meaning) for anything else: other escapes, control or non-ASCII bytes,
// empty or too long.
func copyValue(dst []byte, raw []byte) int {
	n := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c == '\\' {
			if i+1 >= len(raw) {
				return -1
			}
			i++
			switch raw[i] {
			case '/', '\\', '"':
				c = raw[i]
			default:
				return -1
			}
		}
		if c < 0x20 || c > 0x7e || n >= len(dst) {
			return -1
		}
		dst[n] = c
		n++
	}
	if n == 0 {
		return -1
	}
	return n
}

// parseCount reads a token count: a non-negative integer of at most 15
// digits (larger is not a count of tokens).
func parseCount(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
