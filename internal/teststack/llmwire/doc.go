// Package llmwire holds what streaming LLM servers put on the wire, byte
// for byte: the response heads and the body writes of vLLM, TGI, llama.cpp,
// Ollama, OpenAI's Responses API and Anthropic's Messages API, each built
// from the server's source or a recording of it, which every fixture names.
//
// It is the one copy of these bytes: internal/genai's parser tests read
// them, and the receiver's tests stream them through the real kernel
// probes from the servers in internal/teststack. Each constant is one
// write, or one event of a write (Chunked frames it as that write's
// HTTP/1.1 chunk); the comments say which.
package llmwire
