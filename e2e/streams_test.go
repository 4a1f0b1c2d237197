//go:build e2e

package e2e

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

func checkStreams(t *testing.T, prom *promClient, byModel string, clients []streamResult, bytesPerStream int, window time.Duration) {
	n := float64(len(clients))
	w := fmt.Sprintf("[%ds]", int(window.Seconds()))

	// One series per metric, with the attributes of our requests.
	series, err := prom.query("gen_ai_server_time_to_first_token_seconds_count" + byModel)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 1 {
		t.Fatalf("TTFT series for our model: %d, want 1: %v", len(series), series)
	}
	for k, want := range map[string]string{
		"server_port": strconv.Itoa(streamsPort), "http_request_method": "POST",
		"http_route": chatPath, "tokenwire_stream_mode": "http", "job": "tokenwire",
	} {
		if got := series[0].Metric[k]; got != want {
			t.Errorf("TTFT series label %s = %q, want %q", k, got, want)
		}
	}

	// Counts are exact: one TTFT and one duration per stream, events
	// chunks and events-1 intervals per stream, bytes as written. The plain
	// (Content-Length) replies to the same model are not in any of them.
	equal(t, "streams (TTFT count)", value(t, prom, "sum(gen_ai_server_time_to_first_token_seconds_count"+byModel+")"), n)
	equal(t, "streams (duration count)", value(t, prom, "sum(gen_ai_server_request_duration_seconds_count"+byModel+")"), n)
	chunks := value(t, prom, "sum(tokenwire_stream_chunks_total"+byModel+")")
	equal(t, "chunks", chunks, n*events)
	if chunks == n*(events+1) {
		t.Errorf("chunks: one extra per stream: the chunk-framed `data: [DONE]` event (%q) was counted "+
			"as a chunk; the README says it ends the stream and is not a chunk", teststack.ChunkFramed(teststack.DoneEvent))
	}
	equal(t, "chunk intervals", value(t, prom, "sum(tokenwire_stream_chunk_interval_seconds_count"+byModel+")"), n*(events-1))
	equal(t, "body bytes", value(t, prom, "sum(tokenwire_stream_bytes_total"+byModel+")"), n*float64(bytesPerStream))

	// Quantiles the way a user writes them: over increase() of the buckets
	// in a window that covers the measured wave.
	within(t, "TTFT p50 (histogram_quantile)", value(t, prom,
		"histogram_quantile(0.5, sum by (le) (increase(gen_ai_server_time_to_first_token_seconds_bucket"+byModel+w+")))"),
		ttftBucketLow, ttftBucketHigh)
	within(t, "chunk interval p50 (histogram_quantile)", value(t, prom,
		"histogram_quantile(0.5, sum by (le) (increase(tokenwire_stream_chunk_interval_seconds_bucket"+byModel+w+")))"),
		gapBucketLow, gapBucketHigh)
	// No TTFT is below the think time's bucket, no interval below 20 ms's.
	equal(t, "TTFTs at most 0.1 s", value(t, prom,
		`sum(gen_ai_server_time_to_first_token_seconds_bucket`+mergeSel(byModel, `le="0.1"`)+`)`), 0)
	equal(t, "intervals at most 0.01 s", value(t, prom,
		`sum(tokenwire_stream_chunk_interval_seconds_bucket`+mergeSel(byModel, `le="0.01"`)+`)`), 0)

	// Means from _sum/_count are exact kernel timings: at least the
	// server's sleeps, at most what the clients saw.
	var clientTTFT, clientDur time.Duration
	for _, c := range clients {
		clientTTFT += c.TTFT
		clientDur += c.Duration
	}
	clientTTFT /= time.Duration(len(clients))
	clientDur /= time.Duration(len(clients))
	ttft := value(t, prom,
		"sum(gen_ai_server_time_to_first_token_seconds_sum"+byModel+") / sum(gen_ai_server_time_to_first_token_seconds_count"+byModel+")")
	within(t, "TTFT mean (s) against the think time and the clients' mean", ttft, think.Seconds(), clientTTFT.Seconds())
	// A stream ends with data: [DONE], one interval after the last event.
	dur := value(t, prom,
		"sum(gen_ai_server_request_duration_seconds_sum"+byModel+") / sum(gen_ai_server_request_duration_seconds_count"+byModel+")")
	within(t, "stream duration mean (s) against the sleeps and the clients' mean", dur,
		(think + events*interval).Seconds(), clientDur.Seconds())
	// The intervals of a stream and its [DONE] gap fill the time from its
	// first chunk to its end.
	within(t, "chunk interval mean (s) against the sleeps and the other means", value(t, prom,
		"sum(tokenwire_stream_chunk_interval_seconds_sum"+byModel+") / sum(tokenwire_stream_chunk_interval_seconds_count"+byModel+")"),
		(interval - gapSlack).Seconds(), (dur-ttft-(interval-gapSlack).Seconds())/(events-1))
}

// mergeSel adds a matcher to a {..} selector.
func mergeSel(sel, matcher string) string {
	return strings.TrimSuffix(sel, "}") + "," + matcher + "}"
}

// checkGenAI checks what tokenwire read of the streams themselves: the
// conventions' attributes on their series, the token usage their usage
// chunks reported, the time per output token from their own timing, and
// the failing streams' error.type.
func checkGenAI(t *testing.T, prom *promClient, model, failedModel string, clients []streamResult) {
	n := float64(len(clients))
	byModel := selector("gen_ai_request_model", model)
	series, err := prom.query("gen_ai_server_time_to_first_token_seconds_count" + byModel)
	if err != nil || len(series) != 1 {
		t.Fatalf("TTFT series for our model: %v (%v), want 1", series, err)
	}
	for k, want := range map[string]string{
		"gen_ai_operation_name": "chat", "gen_ai_provider_name": "openai", "gen_ai_response_model": model,
		"tokenwire_stream_format": "openai",
	} {
		if got := series[0].Metric[k]; got != want {
			t.Errorf("TTFT series label %s = %q, want %q", k, got, want)
		}
	}

	// Exact: one count per stream and token type, the sums its usage
	// chunk reported.
	for typ, perStream := range map[string]float64{"input": promptTokens, "output": outputTokens} {
		sel := mergeSel(byModel, fmt.Sprintf("gen_ai_token_type=%q", typ))
		equal(t, typ+" token counts", value(t, prom, "sum(tokenwire_gen_ai_server_token_usage_count"+sel+")"), n)
		equal(t, typ+" tokens", value(t, prom, "sum(tokenwire_gen_ai_server_token_usage_sum"+sel+")"), n*perStream)
	}
	// The time per output token of a stream is (duration - time to first
	// token) / (output tokens - 1), so over all streams its sum is the
	// other two sums' difference over the same divisor.
	equal(t, "time per output token counts", value(t, prom, "sum(gen_ai_server_time_per_output_token_seconds_count"+byModel+")"), n)
	tpot := value(t, prom, "sum(gen_ai_server_time_per_output_token_seconds_sum"+byModel+")")
	fromSums := (value(t, prom, "sum(gen_ai_server_request_duration_seconds_sum"+byModel+")") -
		value(t, prom, "sum(gen_ai_server_time_to_first_token_seconds_sum"+byModel+")")) / (outputTokens - 1)
	within(t, "time per output token sum (s) against (duration - TTFT) sums / (output tokens - 1)", tpot,
		fromSums*(1-1e-9), fromSums*(1+1e-9))
	// Each stream writes its events and [DONE] at least an interval apart
	// after the first: events intervals between its first chunk and its end.
	within(t, "time per output token mean (s) against the server's sleeps", tpot/n,
		float64(events)*(interval-gapSlack).Seconds()/(outputTokens-1), math.Inf(1))

	// The failing streams' durations carry their error.type; ours none.
	failed := mergeSel(selector("gen_ai_request_model", failedModel), fmt.Sprintf("error_type=%q", failedType))
	equal(t, "failed streams (duration count with error.type)", value(t, prom,
		"sum(gen_ai_server_request_duration_seconds_count"+failed+")"), warmFailedStreams+failedStreams)
	if s, err := prom.query("gen_ai_server_request_duration_seconds_count" + mergeSel(byModel, `error_type!=""`)); err != nil || hasData(s) {
		t.Errorf("error.type on the streams that did not fail: %v %v", s, err)
	}
	if s, err := prom.query("gen_ai_server_time_per_output_token_seconds_count" + selector("gen_ai_request_model", failedModel)); err != nil || hasData(s) {
		t.Errorf("time per output token of failed streams: %v %v", s, err)
	}
}
