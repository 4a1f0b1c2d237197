package genai

// Every OpenTelemetry semantic-convention name tokenwire reports about
// GenAI streams lives here, so that following a later release of the
// conventions is a change to this file alone.
//
// Pinned release: semantic-conventions v1.41.0
// (https://github.com/open-telemetry/semantic-conventions/tree/v1.41.0,
// docs/gen-ai/gen-ai-metrics.md and model/gen-ai/registry.yaml). Why this
// one: it is the last release of the main conventions repository in which
// the gen_ai.* names are current. v1.42.0 deprecated all of them there and
// moved them to open-telemetry/semantic-conventions-genai, which had no
// release yet when this was written and whose unreleased changes replace
// gen_ai.client.token.usage with counters (gen_ai.client.inference.tokens
// and others). The names below are the same in both places today; when the
// GenAI repository publishes a release, re-check this file against it and
// bump SemconvVersion and SchemaURL together.

// SemconvVersion is the semantic-conventions release these names follow.
const SemconvVersion = "1.41.0"

// SchemaURL is the schema URL of SemconvVersion, for the scope or resource
// that carries these metrics and spans.
const SchemaURL = "https://opentelemetry.io/schemas/" + SemconvVersion

// Metric names. All GenAI metrics are "Development" stability in v1.41.0.
const (
	// MetricServerTimeToFirstToken is the time from the request to the
	// first token (for tokenwire: the first body chunk), histogram, s.
	MetricServerTimeToFirstToken = "gen_ai.server.time_to_first_token"
	// MetricServerRequestDuration is the time to the last byte of the
	// response, histogram, s.
	MetricServerRequestDuration = "gen_ai.server.request.duration"
	// MetricServerTimePerOutputToken is (duration - time to first token) /
	// (output tokens - 1), histogram, s. Only where the stream reported its
	// output tokens (see TimePerOutputToken); never a relabelled chunk
	// interval.
	MetricServerTimePerOutputToken = "gen_ai.server.time_per_output_token"
	// The client-side metrics, for calls this host makes
	// (streams.clients): the operation's duration (from the request's
	// last byte written to the end of the response read), the time to the
	// first chunk read and the time between chunks read (both "SHOULD be
	// reported for streaming calls" only; v1.41.0 defines both), and the
	// tokens the stream itself reports as used.
	MetricClientOperationDuration           = "gen_ai.client.operation.duration"
	MetricClientOperationTimeToFirstChunk   = "gen_ai.client.operation.time_to_first_chunk"
	MetricClientOperationTimePerOutputChunk = "gen_ai.client.operation.time_per_output_chunk"
	MetricClientTokenUsage                  = "gen_ai.client.token.usage"

	// MetricServerTokenUsage is tokenwire's server-side token usage: the
	// conventions define token usage only for clients
	// (gen_ai.client.token.usage: histogram, {token}, one record per
	// operation and gen_ai.token.type). A model server sees the same tokens
	// from the other side, so tokenwire records exactly that instrument,
	// unit, buckets (ClientTokenUsageBuckets) and attributes, from the
	// usage the stream itself reports. The name mirrors the client one
	// under tokenwire's own prefix rather than as "gen_ai.server.token.usage":
	// the conventions' naming guide (docs/general/naming.md, "Recommendations
	// for application developers") advises against new names inside an
	// existing semconv namespace, which a later release could define
	// differently; DESIGN.md's rule is the same. Should the conventions add
	// a server-side token metric, renaming is dropping the prefix here.
	MetricServerTokenUsage = "tokenwire.gen_ai.server.token.usage"
)

// Units.
const (
	UnitSeconds = "s"
	UnitToken   = "{token}"
)

// GenAI attribute keys (registry: model/gen-ai/registry.yaml).
const (
	AttrOperationName                 = "gen_ai.operation.name"
	AttrProviderName                  = "gen_ai.provider.name"
	AttrRequestModel                  = "gen_ai.request.model"
	AttrRequestStream                 = "gen_ai.request.stream"
	AttrResponseModel                 = "gen_ai.response.model"
	AttrResponseID                    = "gen_ai.response.id"
	AttrResponseFinishReasons         = "gen_ai.response.finish_reasons"
	AttrResponseTimeToFirstChunk      = "gen_ai.response.time_to_first_chunk"
	AttrUsageInputTokens              = "gen_ai.usage.input_tokens"
	AttrUsageOutputTokens             = "gen_ai.usage.output_tokens"
	AttrUsageCacheReadInputTokens     = "gen_ai.usage.cache_read.input_tokens"
	AttrUsageCacheCreationInputTokens = "gen_ai.usage.cache_creation.input_tokens"
	AttrUsageReasoningOutputTokens    = "gen_ai.usage.reasoning.output_tokens"
	AttrTokenType                     = "gen_ai.token.type"
	// AttrOpenAIAPIType tells the Chat Completions API from the Responses
	// API on "openai" telemetry (model/openai/registry.yaml).
	AttrOpenAIAPIType = "openai.api.type"
)

// General attribute keys the GenAI metrics and spans carry alongside
// (stable conventions: server, error, http, url, client).
const (
	AttrServerAddress          = "server.address"
	AttrServerPort             = "server.port"
	AttrErrorType              = "error.type"
	AttrHTTPRequestMethod      = "http.request.method"
	AttrHTTPRoute              = "http.route"
	AttrHTTPResponseStatusCode = "http.response.status_code"
	AttrURLPath                = "url.path"
	AttrClientAddress          = "client.address"
	AttrClientPort             = "client.port"
)

// gen_ai.operation.name well-known values (v1.41.0). tokenwire can tell
// the first four from an HTTP request; the agent and tool operations
// happen inside applications and are listed for completeness.
const (
	OperationChat            = "chat"
	OperationGenerateContent = "generate_content"
	OperationTextCompletion  = "text_completion"
	OperationEmbeddings      = "embeddings"
	OperationRetrieval       = "retrieval"
	OperationCreateAgent     = "create_agent"
	OperationInvokeAgent     = "invoke_agent"
	OperationExecuteTool     = "execute_tool"
	OperationInvokeWorkflow  = "invoke_workflow"
)

// gen_ai.provider.name well-known values (v1.41.0; the GenAI repository
// has since added moonshot_ai). Custom values are allowed where none of
// these applies; see Provider.
const (
	ProviderOpenAI           = "openai"
	ProviderGCPGenAI         = "gcp.gen_ai"
	ProviderGCPVertexAI      = "gcp.vertex_ai"
	ProviderGCPGemini        = "gcp.gemini"
	ProviderAnthropic        = "anthropic"
	ProviderCohere           = "cohere"
	ProviderAzureAIInference = "azure.ai.inference"
	ProviderAzureAIOpenAI    = "azure.ai.openai"
	ProviderIBMWatsonxAI     = "ibm.watsonx.ai"
	ProviderAWSBedrock       = "aws.bedrock"
	ProviderPerplexity       = "perplexity"
	ProviderXAI              = "x_ai"
	ProviderDeepSeek         = "deepseek"
	ProviderGroq             = "groq"
	ProviderMistralAI        = "mistral_ai"
)

// gen_ai.token.type values.
const (
	TokenTypeInput  = "input"
	TokenTypeOutput = "output"
)

// openai.api.type values.
const (
	OpenAIAPITypeChatCompletions = "chat_completions"
	OpenAIAPITypeResponses       = "responses"
)

// ErrorTypeOther is error.type's fallback value ("_OTHER", stable), for a
// stream that reported an error without a low-cardinality code.
const ErrorTypeOther = "_OTHER"

// Advised histogram bucket boundaries (ExplicitBucketBoundaries in
// docs/gen-ai/gen-ai-metrics.md, v1.41.0). Callers must not modify them.
var (
	// ServerTimeToFirstTokenBuckets: gen_ai.server.time_to_first_token, s.
	ServerTimeToFirstTokenBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	// ServerRequestDurationBuckets: gen_ai.server.request.duration, s.
	ServerRequestDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	// ServerTimePerOutputTokenBuckets: gen_ai.server.time_per_output_token, s.
	ServerTimePerOutputTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	// ClientOperationDurationBuckets: gen_ai.client.operation.duration, s
	// (also advised for the client time_to_first_chunk and
	// time_per_output_chunk).
	ClientOperationDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	// ClientTokenUsageBuckets: gen_ai.client.token.usage, {token}; also
	// MetricServerTokenUsage's.
	ClientTokenUsageBuckets = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)
