package genai

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
)

// TestNamesMatchThePinnedRelease checks every name and value in
// semconv.go against the OpenTelemetry Go module's generation of the same
// release of the conventions: a typo, or a bump of SemconvVersion without
// the names that changed, fails here.
func TestNamesMatchThePinnedRelease(t *testing.T) {
	if SchemaURL != semconv.SchemaURL {
		t.Errorf("SchemaURL %q, the release's %q", SchemaURL, semconv.SchemaURL)
	}
	for ours, theirs := range map[string]string{
		MetricServerTimeToFirstToken:   genaiconv.ServerTimeToFirstToken{}.Name(),
		MetricServerRequestDuration:    genaiconv.ServerRequestDuration{}.Name(),
		MetricServerTimePerOutputToken: genaiconv.ServerTimePerOutputToken{}.Name(),
		MetricClientOperationDuration:  genaiconv.ClientOperationDuration{}.Name(),
		MetricClientTokenUsage:         genaiconv.ClientTokenUsage{}.Name(),
		UnitToken:                      genaiconv.ClientTokenUsage{}.Unit(),
		UnitSeconds:                    genaiconv.ServerRequestDuration{}.Unit(),
	} {
		if ours != theirs {
			t.Errorf("%q, the release's %q", ours, theirs)
		}
	}
	keys := map[string]attribute.Key{
		AttrOperationName:                 semconv.GenAIOperationNameKey,
		AttrProviderName:                  semconv.GenAIProviderNameKey,
		AttrRequestModel:                  semconv.GenAIRequestModelKey,
		AttrRequestStream:                 semconv.GenAIRequestStreamKey,
		AttrResponseModel:                 semconv.GenAIResponseModelKey,
		AttrResponseID:                    semconv.GenAIResponseIDKey,
		AttrResponseFinishReasons:         semconv.GenAIResponseFinishReasonsKey,
		AttrResponseTimeToFirstChunk:      semconv.GenAIResponseTimeToFirstChunkKey,
		AttrUsageInputTokens:              semconv.GenAIUsageInputTokensKey,
		AttrUsageOutputTokens:             semconv.GenAIUsageOutputTokensKey,
		AttrUsageCacheReadInputTokens:     semconv.GenAIUsageCacheReadInputTokensKey,
		AttrUsageCacheCreationInputTokens: semconv.GenAIUsageCacheCreationInputTokensKey,
		AttrUsageReasoningOutputTokens:    semconv.GenAIUsageReasoningOutputTokensKey,
		AttrTokenType:                     semconv.GenAITokenTypeKey,
		AttrOpenAIAPIType:                 semconv.OpenAIAPITypeKey,
		AttrServerAddress:                 semconv.ServerAddressKey,
		AttrServerPort:                    semconv.ServerPortKey,
		AttrErrorType:                     semconv.ErrorTypeKey,
		AttrHTTPRequestMethod:             semconv.HTTPRequestMethodKey,
		AttrHTTPRoute:                     semconv.HTTPRouteKey,
		AttrHTTPResponseStatusCode:        semconv.HTTPResponseStatusCodeKey,
		AttrURLPath:                       semconv.URLPathKey,
		AttrClientAddress:                 semconv.ClientAddressKey,
		AttrClientPort:                    semconv.ClientPortKey,
	}
	for ours, theirs := range keys {
		if ours != string(theirs) {
			t.Errorf("attribute %q, the release's %q", ours, theirs)
		}
	}
	for _, v := range []struct {
		ours   string
		theirs attribute.KeyValue
	}{
		{OperationChat, semconv.GenAIOperationNameChat},
		{OperationGenerateContent, semconv.GenAIOperationNameGenerateContent},
		{OperationTextCompletion, semconv.GenAIOperationNameTextCompletion},
		{OperationEmbeddings, semconv.GenAIOperationNameEmbeddings},
		{OperationRetrieval, semconv.GenAIOperationNameRetrieval},
		{OperationCreateAgent, semconv.GenAIOperationNameCreateAgent},
		{OperationInvokeAgent, semconv.GenAIOperationNameInvokeAgent},
		{OperationExecuteTool, semconv.GenAIOperationNameExecuteTool},
		{OperationInvokeWorkflow, semconv.GenAIOperationNameInvokeWorkflow},
		{ProviderOpenAI, semconv.GenAIProviderNameOpenAI},
		{ProviderGCPGenAI, semconv.GenAIProviderNameGCPGenAI},
		{ProviderGCPVertexAI, semconv.GenAIProviderNameGCPVertexAI},
		{ProviderGCPGemini, semconv.GenAIProviderNameGCPGemini},
		{ProviderAnthropic, semconv.GenAIProviderNameAnthropic},
		{ProviderCohere, semconv.GenAIProviderNameCohere},
		{ProviderAzureAIInference, semconv.GenAIProviderNameAzureAIInference},
		{ProviderAzureAIOpenAI, semconv.GenAIProviderNameAzureAIOpenAI},
		{ProviderIBMWatsonxAI, semconv.GenAIProviderNameIBMWatsonxAI},
		{ProviderAWSBedrock, semconv.GenAIProviderNameAWSBedrock},
		{ProviderPerplexity, semconv.GenAIProviderNamePerplexity},
		{ProviderXAI, semconv.GenAIProviderNameXAI},
		{ProviderDeepSeek, semconv.GenAIProviderNameDeepseek},
		{ProviderGroq, semconv.GenAIProviderNameGroq},
		{ProviderMistralAI, semconv.GenAIProviderNameMistralAI},
		{TokenTypeInput, semconv.GenAITokenTypeInput},
		{TokenTypeOutput, semconv.GenAITokenTypeOutput},
		{OpenAIAPITypeChatCompletions, semconv.OpenAIAPITypeChatCompletions},
		{OpenAIAPITypeResponses, semconv.OpenAIAPITypeResponses},
		{ErrorTypeOther, semconv.ErrorTypeOther},
	} {
		if v.ours != v.theirs.Value.AsString() {
			t.Errorf("%s value %q, the release's %q", v.theirs.Key, v.ours, v.theirs.Value.AsString())
		}
	}
}
