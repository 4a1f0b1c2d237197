package genai

import (
	"slices"
	"testing"
)

func TestOperation(t *testing.T) {
	for _, c := range []struct {
		method, path, want string
	}{
		{"POST", "/v1/chat/completions", OperationChat},
		{"POST", "/chat/completions", OperationChat},
		{"POST", "/openai/deployments/gpt-4o/chat/completions", OperationChat},
		{"POST", "/v1/responses", OperationChat},
		{"POST", "/v1/messages", OperationChat},
		{"POST", "/api/chat", OperationChat},
		{"POST", "/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse-stream", OperationChat},
		{"POST", "/v1/completions", OperationTextCompletion},
		{"POST", "/completions", OperationTextCompletion},
		{"POST", "/completion", OperationTextCompletion},
		{"POST", "/infill", OperationTextCompletion},
		{"POST", "/api/generate", OperationTextCompletion},
		{"POST", "/generate", OperationTextCompletion},
		{"POST", "/generate_stream", OperationTextCompletion},
		{"POST", "/v1/embeddings", OperationEmbeddings},
		{"POST", "/api/embed", OperationEmbeddings},
		{"POST", "/api/embeddings", OperationEmbeddings},
		{"POST", "/embed", OperationEmbeddings},
		{"POST", "/embedding", OperationEmbeddings},
		{"POST", "/v1beta/models/gemini-2.0-flash:streamGenerateContent", OperationGenerateContent},
		{"POST", "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-1.5-pro:generateContent", OperationGenerateContent},
		{"POST", "/v1beta/models/text-embedding-004:embedContent", OperationEmbeddings},
		{"POST", "/v1/chat/completions/", OperationChat},
		// Not inference, or not known.
		{"GET", "/v1/chat/completions", ""},
		{"POST", "/v1/messages/count_tokens", ""},
		{"POST", "/v1/rerank", ""},
		{"POST", "/tokenize", ""},
		{"POST", "/", ""},
		{"POST", "", ""},
		{"POST", "v1/chat/completions", ""},
	} {
		if got := Operation(c.method, []byte(c.path)); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

func TestModelFromPath(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"/v1beta/models/gemini-2.0-flash:streamGenerateContent", "gemini-2.0-flash"},
		{"/v1/projects/p/locations/l/publishers/google/models/gemini-1.5-pro:generateContent", "gemini-1.5-pro"},
		{"/model/anthropic.claude-3-5-sonnet-20240620-v1:0/converse-stream", "anthropic.claude-3-5-sonnet-20240620-v1:0"},
		{"/v1/models", ""},
		{"/v1/models/llama3", ""},
		{"/v1/chat/completions", ""},
		{"/v1beta/models/:generateContent", ""},
	} {
		if got := string(ModelFromPath([]byte(c.path))); got != c.want {
			t.Errorf("%s: %q, want %q", c.path, got, c.want)
		}
	}
}

func TestProvider(t *testing.T) {
	for _, c := range []struct {
		f         Format
		name      string
		wellKnown bool
	}{
		{FormatOpenAI, "openai", true},
		{FormatOpenAIResponses, "openai", true},
		{FormatAnthropic, "anthropic", true},
		{FormatOllama, "ollama", false},
		{FormatTGI, "huggingface.tgi", false},
		{FormatLlamaCpp, "llama_cpp", false},
		{FormatUnknown, "", false},
	} {
		if name, wk := Provider(c.f); name != c.name || wk != c.wellKnown {
			t.Errorf("%v: %q %v", c.f, name, wk)
		}
	}
	if OpenAIAPIType(FormatOpenAI, OperationChat) != "chat_completions" ||
		OpenAIAPIType(FormatOpenAI, OperationTextCompletion) != "" ||
		OpenAIAPIType(FormatOpenAIResponses, OperationChat) != "responses" ||
		OpenAIAPIType(FormatAnthropic, OperationChat) != "" {
		t.Error("openai.api.type")
	}
}

func TestBuckets(t *testing.T) {
	for name, b := range map[string][]float64{
		MetricServerTimeToFirstToken:   ServerTimeToFirstTokenBuckets,
		MetricServerRequestDuration:    ServerRequestDurationBuckets,
		MetricServerTimePerOutputToken: ServerTimePerOutputTokenBuckets,
		MetricClientOperationDuration:  ClientOperationDurationBuckets,
		MetricClientTokenUsage:         ClientTokenUsageBuckets,
	} {
		if !slices.IsSorted(b) || len(b) < 10 || slices.Compact(slices.Clone(b)) == nil {
			t.Errorf("%s: %v", name, b)
		}
	}
	if SchemaURL != "https://opentelemetry.io/schemas/1.41.0" {
		t.Error(SchemaURL)
	}
}

func TestTimePerOutputToken(t *testing.T) {
	if v, ok := TimePerOutputToken(0.5, 2.5, Count{N: 101, Known: true}); !ok || v != 0.02 {
		t.Errorf("%v %v", v, ok)
	}
	for _, c := range []Count{{}, {N: 1, Known: true}, {N: 0, Known: true}} {
		if _, ok := TimePerOutputToken(0.5, 2.5, c); ok {
			t.Errorf("%+v: reported", c)
		}
	}
	if _, ok := TimePerOutputToken(3, 2, Count{N: 10, Known: true}); ok {
		t.Error("duration before the first token: reported")
	}
}

func TestFormatString(t *testing.T) {
	seen := map[string]bool{}
	for f := FormatUnknown; f <= FormatLlamaCpp; f++ {
		s := f.String()
		if seen[s] {
			t.Errorf("%v: duplicate name %q", int(f), s)
		}
		seen[s] = true
	}
	if Format(200).String() != "unknown" {
		t.Error(Format(200).String())
	}
}
