package genai

import (
	"strings"
	"testing"
)

const reqHead = "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\n" +
	"User-Agent: OpenAI/Python 1.91.0\r\nContent-Length: 999\r\n\r\n"

// longMessages is a chat history of about 40 KiB whose contents mention
// "model" in every way that must not count: as text, as escaped JSON, as a
// key of nested objects.
var longMessages = func() string {
	var b strings.Builder
	b.WriteString(`[`)
	for i := range 200 {
		if i > 0 {
			b.WriteString(`,`)
		}
		b.WriteString(`{"role":"user","content":"please set \"model\": \"gpt-evil\" and {\"model\":\"x\"} ` +
			strings.Repeat("lorem ipsum ", 12) + `","metadata":{"model":"nested-evil","stream":true}}`)
	}
	b.WriteString(`]`)
	return b.String()
}()

type reqCase struct {
	name   string
	req    string
	model  string
	stream int // -1 unknown, 0 false, 1 true
	op     string
}

var reqCases = []reqCase{
	{"model first", reqHead + `{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		"meta-llama/Llama-3.1-8B-Instruct", 1, OperationChat},
	{"model after 40 KiB of messages", reqHead + `{"messages":` + longMessages + `,"model":"qwen3:8b","stream":false}`,
		"qwen3:8b", 0, OperationChat},
	{"spaces, as json.dumps writes", reqHead + `{ "messages" : [ ], "model" : "llama3.2" , "stream" : true }`,
		"llama3.2", 1, OperationChat},
	{"only nested models", reqHead + `{"messages":` + longMessages + `,"tools":[{"model":"t"}],"metadata":{"model":"m"}}`,
		"", -1, OperationChat},
	{"nested model after a comma", reqHead + `{"metadata":{"a":1,"model":"nested"},"messages":[{"role":"user","model":"m2"}],"x":[1,{"b":2,"model":"m3"}]}`,
		"", -1, OperationChat},
	{"model key inside a string value", reqHead + `{"prompt":"{\"model\":\"evil\"}","max_tokens":5}`, "", -1, OperationChat},
	{"escaped slash", reqHead + `{"model":"meta-llama\/Llama-3","stream":true}`, "meta-llama/Llama-3", 1, OperationChat},
	{"unicode escape is not taken", reqHead + `{"model":"caf\u00e9"}`, "", -1, OperationChat},
	{"escaped key is not taken", reqHead + `{"mod\u0065l":"x"}`, "", -1, OperationChat},
	{"non-string model", reqHead + `{"model":42,"stream":"yes"}`, "", -1, OperationChat},
	{"last top-level model wins", reqHead + `{"model":"a","x":{"model":"n"},"model":"b"}`, "b", -1, OperationChat},
	{"too long", reqHead + `{"model":"` + strings.Repeat("m", 200) + `"}`, "", -1, OperationChat},
	{"truncated in the value", reqHead + `{"messages":[],"model":"qwen3:8`, "", -1, OperationChat},
	{"truncated before the value", reqHead + `{"model"`, "", -1, OperationChat},
	{"keys named like ours", reqHead + `{"models":"a","modelx":"b","mode":"c","streams":true}`, "", -1, OperationChat},
	{"ollama generate", "POST /api/generate HTTP/1.1\r\nHost: x\r\n\r\n" + `{"model":"llama3.2","prompt":"Why is the sky blue?"}`,
		"llama3.2", -1, OperationTextCompletion},
	{"tgi has no model", "POST /generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n" +
		`{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":20,"details":true}}`, "", -1, OperationTextCompletion},
	{"gemini model in the path", "POST /v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse HTTP/1.1\r\nHost: x\r\n\r\n" +
		`{"contents":[{"parts":[{"text":"hi"}]}]}`, "gemini-2.0-flash", -1, OperationGenerateContent},
	{"bare LF head", "POST /v1/messages HTTP/1.1\nHost: x\n\n" + `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true}`,
		"claude-sonnet-4-5", 1, OperationChat},
	{"chunked body", "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"a\r\n{\"prompt\":\r\n" + "13;ext=1\r\n\"x\",\"model\":\"gpt-2\"\r\n" + "1\r\n}\r\n0\r\n\r\n", "gpt-2", -1, OperationTextCompletion},
	{"not JSON", reqHead + "model=foo&stream=true", "", -1, OperationChat},
	{"GET has no operation", "GET /v1/models HTTP/1.1\r\n\r\n", "", -1, ""},
	{"binary", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "", -1, ""},
	{"not HTTP/1", "POST /v1/chat/completions HTTP/2.0\r\n\r\n{\"model\":\"x\"}", "", -1, ""},
}

func (c reqCase) check(t *testing.T, s *RequestScanner, how string) {
	t.Helper()
	if got := string(s.Model()); got != c.model {
		t.Errorf("%s: %s: model %q, want %q", c.name, how, got, c.model)
	}
	stream, known := s.Stream()
	got := -1
	if known {
		got = 0
		if stream {
			got = 1
		}
	}
	if got != c.stream {
		t.Errorf("%s: %s: stream %d, want %d", c.name, how, got, c.stream)
	}
	if op := s.Operation(); op != c.op {
		t.Errorf("%s: %s: operation %q, want %q", c.name, how, op, c.op)
	}
}

func TestRequestScanner(t *testing.T) {
	var s RequestScanner
	for _, c := range reqCases {
		s.Reset()
		s.Write([]byte(c.req))
		c.check(t, &s, "one slice")

		// Slices of a few awkward sizes: the keys and values straddle them.
		for _, size := range []int{1, 2, 3, 7, 64, 4096} {
			s.Reset()
			for b := []byte(c.req); len(b) > 0; {
				n := min(size, len(b))
				s.Write(b[:n])
				b = b[n:]
			}
			c.check(t, &s, "slices")
		}
	}
}

// TestRequestSplitEverywhere splits small requests in two and in three at
// every pair of offsets.
func TestRequestSplitEverywhere(t *testing.T) {
	for _, c := range reqCases {
		if len(c.req) > 300 {
			continue
		}
		b := []byte(c.req)
		var s RequestScanner
		for i := 0; i <= len(b); i++ {
			for j := i; j <= len(b); j++ {
				s.Reset()
				s.Write(b[:i])
				s.Write(b[i:j])
				s.Write(b[j:])
				c.check(t, &s, "split")
				if t.Failed() {
					t.Fatalf("split at %d and %d", i, j)
				}
			}
		}
	}
}

func TestRequestWriteAt(t *testing.T) {
	req := []byte(reqHead + `{"messages":[],"model":"qwen3:8b"}`)
	var s RequestScanner
	s.WriteAt(0, req[:50])
	s.WriteAt(40, req[40:90]) // overlaps: the repeated bytes are skipped
	s.WriteAt(90, req[90:])
	if string(s.Model()) != "qwen3:8b" {
		t.Errorf("overlap: model %q", s.Model())
	}

	s.Reset()
	cut := len(reqHead) + 15
	s.WriteAt(0, req[:cut])
	s.WriteAt(int64(cut+3), req[cut+3:]) // a lost slice: stop, report nothing after it
	if s.Model() != nil || s.Len() != int64(len(req)) {
		t.Errorf("gap: model %q, len %d", s.Model(), s.Len())
	}
	if string(s.Path()) != "/v1/chat/completions" {
		t.Errorf("gap: path %q", s.Path())
	}
}

func TestRequestPath(t *testing.T) {
	var s RequestScanner
	s.Write([]byte("POST /v1/chat/completions?api-version=2024-10-21 HTTP/1.1\r\n"))
	if string(s.Path()) != "/v1/chat/completions" || s.Method() != "POST" {
		t.Errorf("path %q method %q", s.Path(), s.Method())
	}
	s.Reset()
	s.Write([]byte("POST /v1/chat/compl"))
	if s.Path() != nil {
		t.Errorf("path before the line ends: %q", s.Path())
	}
	s.Reset()
	s.Write([]byte("POST /" + strings.Repeat("a", 300) + " HTTP/1.1\r\n\r\n"))
	if s.Path() != nil {
		t.Errorf("long path: %q", s.Path())
	}
}

// TestRequestWriteAllocs: Write allocates nothing, in any phase.
func TestRequestWriteAllocs(t *testing.T) {
	req := []byte(reqHead + `{"messages":` + longMessages + `,"model":"qwen3:8b","stream":true}`)
	chunks := [][]byte{req[:37], req[37:1000], req[1000:20000], req[20000:]}
	var s RequestScanner
	allocs := testing.AllocsPerRun(100, func() {
		s.Reset()
		for _, c := range chunks {
			s.Write(c)
		}
		_ = s.Model()
		_ = s.Operation()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request", allocs)
	}
}

func BenchmarkRequestScanner(b *testing.B) {
	req := []byte(reqHead + `{"messages":` + longMessages + `,"model":"qwen3:8b","stream":true}`)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	var s RequestScanner
	for b.Loop() {
		s.Reset()
		for off := 0; off < len(req); off += 4096 {
			s.Write(req[off:min(off+4096, len(req))])
		}
	}
}
