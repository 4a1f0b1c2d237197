package genai

import "github.com/tokenwire/tokenwire/internal/httpsniff"

// MaxID bounds a reported response id (ids seen: "chatcmpl-" and 32 hex
// digits, "resp_" and 48, "msg_" and 24).
const MaxID = 96

// MaxFinishReasons bounds the finish reasons kept, one per choice index
// below it.
const MaxFinishReasons = 8

// Count is a token count and whether the stream reported it.
type Count struct {
	N     int64
	Known bool
}

func (c *Count) set(n int64) { c.N, c.Known = n, true }

// Usage is the token usage a stream reported, as the conventions count it:
// Input includes cached input tokens (gen_ai.usage.input_tokens),
// CacheRead and CacheCreation are parts of it, Reasoning is part of
// Output.
type Usage struct {
	Input, Output            Count
	CacheRead, CacheCreation Count
	Reasoning                Count
}

// Response is what a stream's response says about itself, gathered from
// its first body bytes (ParseFirst) and its tail candidates (ParseTail).
// Later records refine earlier ones: counts are replaced (streams report
// running or final totals), finish reasons are set per choice. It holds no
// pointers to the parsed bytes and allocates nothing; reuse it with Reset.
type Response struct {
	// Format is the recognised wire format; FormatUnknown means nothing
	// else was read.
	Format Format
	Usage  Usage

	model    [httpsniff.MaxModel]byte
	modelLen uint8
	id       [MaxID]byte
	idLen    uint8

	// reasons[i] is choice i's finish reason; list holds the set ones in
	// index order, for FinishReasons.
	reasons [MaxFinishReasons]string
	list    [MaxFinishReasons]string
	nList   uint8

	errType string
	ended   bool

	// Anthropic counts input tokens without the cached ones; they are
	// kept apart and summed into Usage.Input.
	anthropicInput Count
	// llama.cpp's prompt tokens: tokens_evaluated, or its timings'
	// prompt_n + cache_n when that was cut off.
	llamaEvaluated, promptN, cacheN Count
}

// Reset clears r for another stream.
func (r *Response) Reset() { *r = Response{} }

// Model returns gen_ai.response.model as the stream wrote it, or nil. The
// bytes are r's own: valid until r changes; copy or intern to keep them.
func (r *Response) Model() []byte { return r.model[:r.modelLen] }

// ID returns gen_ai.response.id, or nil (see Model).
func (r *Response) ID() []byte { return r.id[:r.idLen] }

// FinishReasons returns gen_ai.response.finish_reasons in choice order, or
// nil. The strings are interned; the slice is r's own.
func (r *Response) FinishReasons() []string {
	if r.nList == 0 {
		return nil
	}
	return r.list[:r.nList]
}

// ErrorType returns the low-cardinality error code the stream reported
// (error.type), ErrorTypeOther for an error without one, or "".
func (r *Response) ErrorType() string { return r.errType }

// Ended reports whether the stream said it was complete (a [DONE], a
// finish reason, a final usage or done event). Counts of a stream that
// did not end may be running totals.
func (r *Response) Ended() bool { return r.ended }

func (r *Response) setModel(raw []byte) {
	if n := copyValue(r.model[:], raw); n > 0 {
		r.modelLen = uint8(n)
	}
}

func (r *Response) setID(raw []byte) {
	if n := copyValue(r.id[:], raw); n > 0 {
		r.idLen = uint8(n)
	}
}

// setReason records choice i's finish reason (i < 0: unknown, taken as 0).
func (r *Response) setReason(i int64, s string) {
	if i < 0 {
		i = 0
	}
	if i >= MaxFinishReasons || s == "" {
		return
	}
	r.reasons[i] = s
	r.nList = 0
	for _, v := range r.reasons {
		if v != "" {
			r.list[r.nList] = v
			r.nList++
		}
	}
	r.ended = true
}

func (r *Response) setError(s string) {
	if s != "" {
		r.errType = s
	}
}

// sumAnthropicInput recomputes Usage.Input from Anthropic's parts, which
// may arrive in any order and in more than one event.
func (r *Response) sumAnthropicInput() {
	if !r.anthropicInput.Known {
		return
	}
	n := r.anthropicInput.N
	if r.Usage.CacheRead.Known {
		n += r.Usage.CacheRead.N
	}
	if r.Usage.CacheCreation.Known {
		n += r.Usage.CacheCreation.N
	}
	r.Usage.Input.set(n)
}

// sumLlamaInput sets Usage.Input from llama.cpp's tokens_evaluated, or
// from its timings when no event showed tokens_evaluated.
func (r *Response) sumLlamaInput() {
	switch {
	case r.llamaEvaluated.Known:
		r.Usage.Input = r.llamaEvaluated
	case r.promptN.Known:
		n := r.promptN.N
		if r.cacheN.Known {
			n += r.cacheN.N
		}
		r.Usage.Input.set(n)
	}
}

// TimePerOutputToken returns gen_ai.server.time_per_output_token, in the
// unit of its arguments: the time after the first token divided by the
// tokens after the first, as the conventions define it. ok is false when
// the output tokens are unknown or fewer than two, or the times are not
// ordered: then the metric is not recorded.
func TimePerOutputToken(timeToFirstToken, duration float64, output Count) (float64, bool) {
	if !output.Known || output.N < 2 || duration < timeToFirstToken || timeToFirstToken < 0 {
		return 0, false
	}
	return (duration - timeToFirstToken) / float64(output.N-1), true
}
