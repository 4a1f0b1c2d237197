package genai

import (
	"bytes"

	"github.com/tokenwire/tokenwire/internal/httpsniff"
)

// Operation returns gen_ai.operation.name for a request, from its method
// and path (without query), or "" when the path is not an inference
// endpoint tokenwire knows. Inference is always a POST. Paths are matched
// by their last segments so that prefixes (a gateway's "/openai", Azure's
// "/openai/deployments/{name}") do not matter:
//
//	.../chat/completions, .../responses, /v1/messages, /api/chat,
//	.../converse(-stream)                        chat
//	.../completions, /completion, /infill, /api/generate,
//	/generate, /generate_stream                  text_completion
//	.../embeddings, /api/embed, /embed, /embedding,
//	...:embedContent, ...:batchEmbedContents     embeddings
//	...:generateContent, ...:streamGenerateContent generate_content
//
// It does not allocate.
func Operation(method string, path []byte) string {
	if method != "POST" || len(path) == 0 || path[0] != '/' {
		return ""
	}
	for len(path) > 1 && path[len(path)-1] == '/' {
		path = path[:len(path)-1]
	}
	// Gemini and Vertex AI: the method is the last segment's ":verb".
	last := path[bytes.LastIndexByte(path, '/')+1:]
	if i := bytes.LastIndexByte(last, ':'); i >= 0 {
		switch string(last[i+1:]) {
		case "generateContent", "streamGenerateContent":
			return OperationGenerateContent
		case "embedContent", "batchEmbedContents":
			return OperationEmbeddings
		}
	}
	switch string(path) {
	case "/api/chat":
		return OperationChat
	case "/api/generate", "/generate", "/generate_stream", "/completion", "/infill":
		return OperationTextCompletion
	case "/api/embed", "/embed", "/embedding":
		return OperationEmbeddings
	}
	switch {
	case hasSuffix(path, "/chat/completions"), hasSuffix(path, "/responses"),
		hasSuffix(path, "/v1/messages"), hasSuffix(path, "/converse"), hasSuffix(path, "/converse-stream"):
		return OperationChat
	case hasSuffix(path, "/completions"):
		return OperationTextCompletion
	case hasSuffix(path, "/embeddings"):
		return OperationEmbeddings
	}
	return ""
}

func hasSuffix(b []byte, s string) bool {
	return len(b) >= len(s) && string(b[len(b)-len(s):]) == s
}

// ModelFromPath returns the model a path names, or nil: Gemini and Vertex
// AI put it before the method ("/v1beta/models/gemini-2.0-flash:
// streamGenerateContent"), Bedrock after "/model/"
// ("/model/{modelId}/converse-stream"). The result is a slice of path,
// only when it is printable and at most httpsniff.MaxModel bytes.
func ModelFromPath(path []byte) []byte {
	var m []byte
	if i := bytes.LastIndex(path, []byte("/models/")); i >= 0 {
		rest := path[i+len("/models/"):]
		if j := bytes.LastIndexByte(rest, ':'); j > 0 && bytes.IndexByte(rest, '/') < 0 {
			m = rest[:j]
		}
	} else if bytes.HasPrefix(path, []byte("/model/")) {
		rest := path[len("/model/"):]
		if j := bytes.IndexByte(rest, '/'); j > 0 {
			m = rest[:j]
		}
	}
	if len(m) == 0 || len(m) > httpsniff.MaxModel || !printableNoSpace(m) {
		return nil
	}
	return m
}

func printableNoSpace(b []byte) bool {
	for _, c := range b {
		if c <= 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
