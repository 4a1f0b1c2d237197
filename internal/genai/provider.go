package genai

// Custom gen_ai.provider.name values for self-hosted servers' native APIs:
// no well-known value applies to them (see the package doc).
const (
	ProviderOllama   = "ollama"
	ProviderHFTGI    = "huggingface.tgi"
	ProviderLlamaCpp = "llama_cpp"
)

// Provider returns the gen_ai.provider.name that the wire format f speaks
// for, and whether it is one of the conventions' well-known values. It
// returns "", false for FormatUnknown. The receiver should prefer a
// configured per-port value, and may leave custom values off.
func Provider(f Format) (name string, wellKnown bool) {
	switch f {
	case FormatOpenAI, FormatOpenAIResponses:
		return ProviderOpenAI, true
	case FormatAnthropic:
		return ProviderAnthropic, true
	case FormatOllama:
		return ProviderOllama, false
	case FormatTGI:
		return ProviderHFTGI, false
	case FormatLlamaCpp:
		return ProviderLlamaCpp, false
	}
	return "", false
}

// OpenAIAPIType returns the openai.api.type of a stream in format f for
// operation op, or "" when it is neither of the two APIs the conventions
// name (legacy text completions have no value).
func OpenAIAPIType(f Format, op string) string {
	switch {
	case f == FormatOpenAI && op == OperationChat:
		return OpenAIAPITypeChatCompletions
	case f == FormatOpenAIResponses:
		return OpenAIAPITypeResponses
	}
	return ""
}
