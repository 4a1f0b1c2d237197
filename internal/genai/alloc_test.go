package genai

import (
	"testing"

	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// TestParseAllocs: parsing allocates nothing once the finish reasons and
// error types it meets are known, whatever the format.
func TestParseAllocs(t *testing.T) {
	for _, s := range streams {
		head, first := []byte(s.head), firstOf(s.writes[0])
		tails := make([][]byte, len(s.writes))
		for i, w := range s.writes {
			tails[i] = tailOf(w)
		}
		var r Response
		allocs := testing.AllocsPerRun(50, func() {
			r.Reset()
			ParseFirst(&r, head, first)
			for _, tail := range tails {
				ParseTail(&r, tail)
			}
			_ = r.FinishReasons()
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per stream", s.name, allocs)
		}
	}
}

func BenchmarkParseTail(b *testing.B) {
	tail := tailOf(llmwire.Chunked(llmwire.LlamaFinal))
	var r Response
	b.ReportAllocs()
	for b.Loop() {
		r = Response{Format: FormatLlamaCpp}
		ParseTail(&r, tail)
	}
}

func BenchmarkParseFirst(b *testing.B) {
	head, first := []byte(llmwire.UvicornHead), firstOf(llmwire.Chunked(llmwire.VLLMChatFirst))
	var r Response
	b.ReportAllocs()
	for b.Loop() {
		r.Reset()
		ParseFirst(&r, head, first)
	}
}
