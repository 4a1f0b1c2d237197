package genai

// event is what one JSON value says that is applied only once the value
// has been read: a choice's index and finish reason (in either order), and
// llama.cpp's fields, whose meaning depends on whether the event is final.
type event struct {
	choice       int64
	choiceReason string

	// OpenAI: whether a choices element closed, whether the choices array
	// closed with none (the final usage chunk has no choices), and whether
	// the chunk had usage.
	elements, emptyChoices, usage bool

	// Responses: response.status, incomplete_details.reason, the status a
	// terminal event's type names, and an error event's code.
	status, incomplete, terminal, errCode string

	// An error field or event was seen (its code, if any, is set apart).
	sawError bool

	stop                 int8 // llama.cpp "stop": 1 true, -1 false, 0 not seen
	stopType             []byte
	predicted, evaluated Count
	tPredicted, tPrompt  Count
	tCache               Count
}

// extract applies one JSON value, in r.Format, to r. Each rule names the
// path its value has in the servers' source (see internal/teststack/llmwire).
func extract(r *Response, w *walker) {
	ev := event{choice: -1}
	for t := w.next(); t != tokNone; t = w.next() {
		switch r.Format {
		case FormatOpenAI:
			openAIRule(r, w, t, &ev)
		case FormatOpenAIResponses:
			responsesRule(r, w, t, &ev)
		case FormatAnthropic:
			anthropicRule(r, w, t, &ev)
		case FormatOllama:
			ollamaRule(r, w, t, &ev)
		case FormatTGI:
			tgiRule(r, w, t, &ev)
		case FormatLlamaCpp:
			llamaRule(r, w, t, &ev)
		}
	}
	switch r.Format {
	case FormatOpenAIResponses:
		// A terminal event's status is its type's last word; the
		// response's status field says the same where it was not cut off.
		switch {
		case ev.incomplete != "":
			r.setReason(0, ev.incomplete)
		case ev.status == "completed" || ev.status == "incomplete" || ev.status == "failed" || ev.status == "cancelled":
			r.setReason(0, ev.status)
		case ev.terminal != "":
			r.setReason(0, ev.terminal)
		}
		if ev.terminal != "" {
			r.ended = true
		}
		if ev.sawError {
			r.setError(orOther(ev.errCode))
		}
	case FormatOpenAI:
		// The chunk after the last choice's (stream_options.include_usage)
		// has no choices and the final usage.
		if ev.emptyChoices && ev.usage {
			r.ended = true
		}
	case FormatAnthropic:
		r.sumAnthropicInput()
	case FormatLlamaCpp:
		llamaCommit(r, &ev)
	}
	if ev.sawError && r.errType == "" {
		r.setError(ErrorTypeOther)
	}
}

func orOther(s string) string {
	if s == "" {
		return ErrorTypeOther
	}
	return s
}

// str reports whether the current token is a string without escapes.
func str(w *walker, t tok) bool { return t == tokString && !w.esc }

func count(c *Count, w *walker, t tok) {
	if t != tokNumber {
		return
	}
	if n, ok := parseCount(w.val); ok {
		c.set(n)
	}
}

// openAIRule: chat.completion.chunk and text_completion chunks (vLLM
// serving_chat.py and completion/serving.py, TGI chat.rs, llama.cpp
// server-task.cpp, Ollama openai.go).
func openAIRule(r *Response, w *walker, t tok, ev *event) {
	if t == tokClose {
		// A choices element ended: its index and reason are both read.
		switch {
		case w.closedAt("*", "[]"):
			if ev.choiceReason != "" {
				r.setReason(ev.choice, ev.choiceReason)
			}
			ev.choice, ev.choiceReason, ev.elements = -1, "", true
		case w.closedAt("choices"):
			ev.emptyChoices = !ev.elements
		}
		return
	}
	switch {
	case w.at("id"):
		if str(w, t) {
			r.setID(w.val)
		}
	case w.at("model"):
		if str(w, t) {
			r.setModel(w.val)
		}
	case w.at("*", "[]", "index"):
		if n, ok := parseCount(w.val); ok && t == tokNumber {
			ev.choice = n
		}
	case w.at("*", "[]", "finish_reason"):
		if str(w, t) {
			ev.choiceReason = reason(w.val)
		}
	case w.at("usage", "prompt_tokens"):
		count(&r.Usage.Input, w, t)
		ev.usage = true
	case w.at("usage", "completion_tokens"):
		count(&r.Usage.Output, w, t)
		ev.usage = true
	case w.at("usage", "prompt_tokens_details", "cached_tokens"):
		count(&r.Usage.CacheRead, w, t)
	case w.at("usage", "completion_tokens_details", "reasoning_tokens"):
		count(&r.Usage.Reasoning, w, t)
	case w.at("error", "type"), w.at("error_type"):
		if str(w, t) {
			r.setError(errorType(w.val))
		}
	case w.at("error", "message"), w.at("error"):
		ev.sawError = t != tokNull
	}
}

// responsesRule: Responses API events (OpenAI, vLLM responses/protocol.py,
// Ollama responses.go, llama.cpp). Usage and model are only ever in the
// response object at depth 2, so they are read under a cut-off key too.
func responsesRule(r *Response, w *walker, t tok, ev *event) {
	switch {
	case w.at("type"):
		if !str(w, t) {
			return
		}
		switch string(w.val) {
		case "response.completed":
			ev.terminal = "completed"
		case "response.incomplete":
			ev.terminal = "incomplete"
		case "response.failed":
			ev.terminal = "failed"
		case "error":
			ev.sawError = true
		}
	case w.at("response", "id"):
		if str(w, t) {
			r.setID(w.val)
		}
	case w.at("*", "model"):
		if str(w, t) {
			r.setModel(w.val)
		}
	case w.at("response", "status"):
		if str(w, t) {
			ev.status = reason(w.val)
		}
	case w.at("*", "incomplete_details", "reason"):
		if str(w, t) {
			ev.incomplete = reason(w.val)
		}
	case w.at("*", "usage", "input_tokens"):
		count(&r.Usage.Input, w, t)
		r.ended = r.ended || r.Usage.Input.Known
	case w.at("*", "usage", "output_tokens"):
		count(&r.Usage.Output, w, t)
	case w.at("*", "usage", "input_tokens_details", "cached_tokens"):
		count(&r.Usage.CacheRead, w, t)
	case w.at("*", "usage", "output_tokens_details", "reasoning_tokens"):
		count(&r.Usage.Reasoning, w, t)
	case w.at("response", "error", "code"), w.at("error", "code"), w.at("code"):
		if str(w, t) {
			ev.errCode = errorType(w.val)
			ev.sawError = true
		}
	}
}

// anthropicRule: Messages events (Anthropic's streaming docs, Ollama
// anthropic.go, llama.cpp server-task.cpp). message_start's output_tokens
// is a placeholder; message_delta's usage is cumulative.
func anthropicRule(r *Response, w *walker, t tok, ev *event) {
	switch {
	case w.at("type"):
		if str(w, t) {
			switch string(w.val) {
			case "message_stop":
				r.ended = true
			case "error":
				ev.sawError = true
			}
		}
	case w.at("message", "id"):
		if str(w, t) {
			r.setID(w.val)
		}
	case w.at("message", "model"):
		if str(w, t) {
			r.setModel(w.val)
		}
	case w.at("message", "usage", "input_tokens"), w.at("usage", "input_tokens"):
		count(&r.anthropicInput, w, t)
	case w.at("message", "usage", "cache_read_input_tokens"), w.at("usage", "cache_read_input_tokens"):
		count(&r.Usage.CacheRead, w, t)
	case w.at("message", "usage", "cache_creation_input_tokens"), w.at("usage", "cache_creation_input_tokens"):
		count(&r.Usage.CacheCreation, w, t)
	case w.at("usage", "output_tokens"):
		count(&r.Usage.Output, w, t)
	case w.at("delta", "stop_reason"):
		if str(w, t) {
			r.setReason(0, reason(w.val))
		}
	case w.at("error", "type"):
		if str(w, t) {
			r.setError(errorType(w.val))
		}
	}
}

// ollamaRule: /api/chat and /api/generate lines (Ollama api/types.go
// ChatResponse, GenerateResponse and Metrics). The metrics are omitted
// while zero, so they only appear on the final line.
func ollamaRule(r *Response, w *walker, t tok, ev *event) {
	switch {
	case w.at("model"):
		if str(w, t) {
			r.setModel(w.val)
		}
	case w.at("done"):
		if t == tokTrue {
			r.ended = true
		}
	case w.at("done_reason"):
		if str(w, t) {
			r.setReason(0, reason(w.val))
		}
	case w.at("prompt_eval_count"):
		count(&r.Usage.Input, w, t)
	case w.at("eval_count"):
		count(&r.Usage.Output, w, t)
	case w.at("error"):
		ev.sawError = t == tokString
	}
}

// tgiRule: /generate_stream events (TGI router lib.rs StreamResponse and
// StreamDetails); details are only sent when the request asked for them.
func tgiRule(r *Response, w *walker, t tok, ev *event) {
	switch {
	case w.at("generated_text"):
		if t == tokString {
			r.ended = true
		}
	case w.at("details", "finish_reason"):
		if str(w, t) {
			r.setReason(0, reason(w.val))
		}
	case w.at("details", "generated_tokens"):
		count(&r.Usage.Output, w, t)
	case w.at("details", "input_length"):
		count(&r.Usage.Input, w, t)
	case w.at("error_type"):
		if str(w, t) {
			r.setError(errorType(w.val))
		}
	case w.at("error"):
		ev.sawError = t == tokString
	}
}

// llamaRule: /completion events (llama.cpp server-task.cpp,
// to_json_non_oaicompat of the partial and final results).
func llamaRule(r *Response, w *walker, t tok, ev *event) {
	switch {
	case w.at("model"):
		if str(w, t) {
			r.setModel(w.val)
		}
	case w.at("stop"):
		switch t {
		case tokTrue:
			ev.stop = 1
		case tokFalse:
			ev.stop = -1
		}
	case w.at("stop_type"):
		if str(w, t) {
			ev.stopType = w.val
		}
	case w.at("tokens_predicted"):
		count(&ev.predicted, w, t)
	case w.at("tokens_evaluated"):
		count(&ev.evaluated, w, t)
	case w.at("timings", "predicted_n"):
		count(&ev.tPredicted, w, t)
	case w.at("timings", "prompt_n"):
		count(&ev.tPrompt, w, t)
	case w.at("timings", "cache_n"):
		count(&ev.tCache, w, t)
	case w.at("error", "type"):
		if str(w, t) {
			r.setError(errorType(w.val))
		}
	case w.at("error", "message"):
		ev.sawError = true
	}
}

// llamaCommit applies a llama.cpp event. The final event is the one with
// "stop": true; in a tail cut before it, stop_type (final only) tells.
// Partial events carry running counts, kept until a final one replaces
// them.
func llamaCommit(r *Response, ev *event) {
	final := ev.stop == 1 || ev.stop == 0 && ev.stopType != nil
	if final {
		r.ended = true
		if ev.stopType != nil && string(ev.stopType) != "none" {
			r.setReason(0, reason(ev.stopType))
		}
	}
	switch {
	case ev.predicted.Known:
		r.Usage.Output = ev.predicted
	case final && ev.tPredicted.Known:
		r.Usage.Output = ev.tPredicted
	}
	if ev.evaluated.Known {
		r.llamaEvaluated = ev.evaluated
	}
	if ev.tPrompt.Known {
		r.promptN, r.cacheN = ev.tPrompt, ev.tCache
	}
	r.sumLlamaInput()
}
