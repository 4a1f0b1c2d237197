package main

// The user-space interceptor: what an APM middleware in the server does to
// get the numbers tokenwire gets from the kernel. Per stream and per chunk
// it records TTFT, the chunk interval, chunks and bytes with the
// OpenTelemetry Go SDK, and ends one SERVER span per stream carrying the
// attributes and the first_chunk event tokenwire puts on its spans
// (receiver/tokenwirereceiver/streams.go). Metrics go out through a
// periodic reader, spans through the SDK's batch span processor, both over
// OTLP/gRPC to the same collector.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tokenwire/tokenwire/internal/stream"
)

// Histogram bounds as the tokenwire receiver exports them
// (receiver/tokenwirereceiver/histograms.go): the semantic conventions'
// advice for TTFT and request duration, stream.DefaultGapBounds for the
// chunk interval. Same bounds, same histogram size on the wire.
var (
	ttftBounds     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	durationBounds = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
)

func gapBounds() []float64 {
	b := make([]float64, len(stream.DefaultGapBounds))
	for i, d := range stream.DefaultGapBounds {
		b[i] = d.Seconds()
	}
	return b
}

type interceptor struct {
	mp                  *sdkmetric.MeterProvider
	tp                  *sdktrace.TracerProvider
	tracer              trace.Tracer
	propagator          propagation.TextMapPropagator
	port                int
	ttft, interval, dur metric.Float64Histogram
	chunks, bytes       metric.Int64Counter
}

// newInterceptor sets up the SDK: metrics every `every` (the receiver's
// default collection_interval, so both variants export as often) and spans
// through the batch span processor at its defaults.
func newInterceptor(endpoint string, every time.Duration, port int) (*interceptor, error) {
	ctx := context.Background()
	// The resource tokenwire gives its telemetry (host and process), plus
	// the SDK's own service and telemetry.sdk attributes as any SDK user has.
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithHost(), resource.WithProcessPID(), resource.WithProcessExecutableName())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, err
	}
	mexp, err := otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(endpoint), otlpmetricgrpc.WithInsecure())
	if err != nil {
		return nil, err
	}
	sexp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, err
	}
	in := &interceptor{
		mp: sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
			sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(every)))),
		tp:         sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(sexp)),
		propagator: propagation.TraceContext{},
		port:       port,
	}
	in.tracer = in.tp.Tracer("bench/interceptor")
	m := in.mp.Meter("bench/interceptor")
	if in.ttft, err = m.Float64Histogram("gen_ai.server.time_to_first_token", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(ttftBounds...)); err != nil {
		return nil, err
	}
	if in.interval, err = m.Float64Histogram("tokenwire.stream.chunk.interval", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(gapBounds()...)); err != nil {
		return nil, err
	}
	if in.dur, err = m.Float64Histogram("gen_ai.server.request.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBounds...)); err != nil {
		return nil, err
	}
	if in.chunks, err = m.Int64Counter("tokenwire.stream.chunks", metric.WithUnit("{chunk}")); err != nil {
		return nil, err
	}
	if in.bytes, err = m.Int64Counter("tokenwire.stream.bytes", metric.WithUnit("By")); err != nil {
		return nil, err
	}
	return in, nil
}

// shutdown flushes what is pending (spans first: they are the larger part).
func (in *interceptor) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	in.tp.Shutdown(ctx)
	in.mp.Shutdown(ctx)
}

// streamRecorder is one stream's state in the interceptor.
type streamRecorder struct {
	in          *interceptor
	span        trace.Span
	start, last time.Time
	first       time.Time
	n           int
	bytes       int64
	gapMax      time.Duration
	attrs       metric.MeasurementOption
}

// begin starts a stream's span at t0 (the handler's entry: the earliest
// point the application sees the request) and fixes its metric attributes.
func (in *interceptor) begin(r *http.Request, t0 time.Time) *streamRecorder {
	// The metric attribute set tokenwire uses (gen_ai.request.model is
	// empty there when the request has no JSON body, as here).
	attrs := metric.WithAttributes(
		attribute.Int("server.port", in.port),
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.String("gen_ai.request.model", ""),
		attribute.String("tokenwire.stream.mode", "http"),
	)
	spanAttrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.Int("server.port", in.port),
		attribute.String("tokenwire.stream.mode", "http"),
	}
	if host, p, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		pn, _ := strconv.Atoi(p)
		spanAttrs = append(spanAttrs, attribute.String("client.address", host), attribute.Int("client.port", pn))
	}
	// Join the caller's trace if it sent a traceparent, as tokenwire does.
	ctx := in.propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	_, span := in.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(t0), trace.WithAttributes(spanAttrs...))
	return &streamRecorder{in: in, span: span, start: t0, last: t0, attrs: attrs}
}

// chunk records one event written (and flushed) to the client.
func (s *streamRecorder) chunk(size int) {
	now := time.Now()
	ctx := context.Background()
	if s.n == 0 {
		s.first = now
		s.in.ttft.Record(ctx, now.Sub(s.start).Seconds(), s.attrs)
		s.span.AddEvent("first_chunk", trace.WithTimestamp(now))
	} else {
		gap := now.Sub(s.last)
		s.gapMax = max(s.gapMax, gap)
		s.in.interval.Record(ctx, gap.Seconds(), s.attrs)
	}
	s.in.chunks.Add(ctx, 1, s.attrs)
	s.in.bytes.Add(ctx, int64(size), s.attrs)
	s.n++
	s.bytes += int64(size)
	s.last = now
}

// end records the stream's duration and ends its span with the per-stream
// attributes tokenwire puts on its span at the stream's end.
func (s *streamRecorder) end(status int, reason string) {
	now := time.Now()
	s.in.dur.Record(context.Background(), now.Sub(s.start).Seconds(), s.attrs)
	attrs := []attribute.KeyValue{
		attribute.Int("http.response.status_code", status),
		attribute.String("tokenwire.stream.end_reason", reason),
		attribute.Int64("tokenwire.stream.chunks", int64(s.n)),
		attribute.Int64("tokenwire.stream.bytes", s.bytes),
		attribute.Float64("tokenwire.stream.chunk.interval.max", s.gapMax.Seconds()),
	}
	if s.n > 0 {
		attrs = append(attrs, attribute.Float64("gen_ai.response.time_to_first_chunk", s.first.Sub(s.start).Seconds()))
	}
	s.span.SetAttributes(attrs...)
	if status >= 500 {
		s.span.SetStatus(codes.Error, "")
	}
	s.span.End(trace.WithTimestamp(now))
}
