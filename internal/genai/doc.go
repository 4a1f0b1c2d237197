// Package genai reads GenAI facts from the bytes a streaming LLM server
// reads and writes: the model a request asks for, the operation its path
// names, and what the response stream says of itself (its wire format,
// model, id, token usage, finish reasons, error). It is pure user space:
// no kernel, no pdata; the stream aggregator feeds it what the stream
// probe captured and the receiver turns the results into attributes.
//
// # Inputs, and why they are read the way they are
//
// Every input may be truncated, split anywhere, binary or hostile. Nothing
// here panics on it, nothing grows with it, and a value is reported only
// when the bytes prove it: a string whose closing quote was seen, a number
// followed by a delimiter, a key at the depth a format puts it.
//
//   - The request (head and body) arrives as consecutive slices of any size.
//     RequestScanner keeps a small fixed state across them and never
//     allocates: it reads the request line, skips the headers, de-chunks a
//     chunked body, and follows the JSON body's top level only, so that a
//     "model" inside messages, tools or strings is never taken for the
//     request's.
//   - The response head, perhaps with the first body bytes, and the first
//     body write (up to 512 bytes from its start) are parsed forwards: they
//     start where an event starts and may be cut at their end.
//   - Tail candidates are the last bytes of a write, so they end where an
//     event ends and may start in the middle of one (the Responses API's
//     response.completed and Ollama's final /api/generate line are far
//     longer than 512 bytes). Each line is parsed from its end backwards
//     first: the end of a line is outside any string and at depth 0, so a
//     backward pass finds which bytes are inside strings and how deep the
//     first readable byte is, and a forward pass from there knows the depth
//     of every key. Keys of objects opened before the cut are unknown; a
//     rule may accept them as a wildcard only where the format has a single
//     object that can hold the key at that depth.
//
// # Formats
//
// Format names the wire format a stream was recognised as (see Format):
// OpenAI-style chat and text completion chunks (vLLM, TGI's and llama.cpp's
// and Ollama's OpenAI-compatible routes, OpenAI itself), the OpenAI
// Responses API's typed events, Anthropic Messages events, Ollama's NDJSON,
// TGI's /generate_stream events and llama.cpp's /completion events. A
// stream whose format is not recognised stays FormatUnknown and yields
// nothing else; it is still measured.
//
// # gen_ai.operation.name
//
// Operation maps a POST request's path to a well-known value of the pinned
// conventions (semconv.go): chat for chat completions, the Responses API,
// Anthropic Messages, Ollama /api/chat and Bedrock Converse; text_completion
// for legacy completions, Ollama /api/generate, TGI /generate(_stream) and
// llama.cpp /completion and /infill (a prompt in, its continuation out);
// embeddings for the embedding routes; generate_content for Gemini and
// Vertex ":generateContent". Anything else is "" (unknown): a guess would
// put wrong values on metrics, and the receiver can leave the attribute off
// or use a configured value.
//
// # gen_ai.provider.name
//
// The conventions make this attribute the discriminator of the telemetry
// "flavor" a provider's API has, set "based on the instrumentation's best
// knowledge", and note that many hosts serve other providers' models behind
// the OpenAI API (registry.yaml, gen_ai.provider.name note). A server-side
// observer knows the API the bytes follow, not who trained the model or
// runs the host. So Provider reports the origin of the wire format, and
// says whether the value is well-known:
//
//   - OpenAI chat/completions chunks and Responses API events: "openai",
//     well-known. It is what an OpenAI client instrumentation calling the
//     same server reports, so client and server series of one call agree.
//   - Anthropic Messages events: "anthropic", well-known, for the same
//     reason (Ollama and llama.cpp serve this API too).
//   - Ollama's native API: "ollama"; TGI's native API: "huggingface.tgi";
//     llama.cpp's native API: "llama_cpp". These are custom values (no
//     well-known one applies, which the conventions allow), named as their
//     naming guide asks for system names: the project's own name, or the
//     organisation's prefix for a product of a company.
//   - Unknown formats: "". Nothing on the wire says who it is.
//
// vLLM, TensorRT-LLM or SGLang behind the OpenAI API are reported as
// "openai" unless the user says otherwise: the receiver should let a
// per-port setting override Provider, and leave the attribute off (rather
// than invent one) when neither knows.
package genai
