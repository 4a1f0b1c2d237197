package main

// spanExporter is an OTLP/gRPC span exporter for the SDK's batch span
// processor. It stands in for go.opentelemetry.io/otel/exporters/otlp/
// otlptrace/otlptracegrpc, which is not a dependency of this module (the
// metric side uses the real otlpmetricgrpc). Per batch it does the same
// work: group the spans by resource and scope, convert them to OTLP
// protobuf (as otlptrace's internal tracetransform does), and make one
// Export call with a 10 s timeout (that exporter's default). It has no
// retry queue; on loopback to a healthy collector none is needed, and a
// failed export is returned to the processor, which drops the batch.

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type spanExporter struct {
	conn   *grpc.ClientConn
	client coltracepb.TraceServiceClient
}

var _ sdktrace.SpanExporter = (*spanExporter)(nil)

func newSpanExporter(endpoint string) (*spanExporter, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &spanExporter{conn: conn, client: coltracepb.NewTraceServiceClient(conn)}, nil
}

// ExportSpans sends one batch.
func (e *spanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := e.client.Export(ctx, &coltracepb.ExportTraceServiceRequest{ResourceSpans: otlpSpans(spans)})
	return err
}

// Shutdown closes the connection.
func (e *spanExporter) Shutdown(context.Context) error { return e.conn.Close() }

// otlpSpans groups spans by resource, then by scope.
func otlpSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	type scopeKey struct {
		res   attribute.Distinct
		scope instrumentation.Scope
	}
	byRes := map[attribute.Distinct]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	var out []*tracepb.ResourceSpans
	for _, sd := range spans {
		rk := sd.Resource().Equivalent()
		rs, ok := byRes[rk]
		if !ok {
			rs = &tracepb.ResourceSpans{Resource: otlpResource(sd.Resource()), SchemaUrl: sd.Resource().SchemaURL()}
			byRes[rk] = rs
			out = append(out, rs)
		}
		sk := scopeKey{rk, sd.InstrumentationScope()}
		ss, ok := byScope[sk]
		if !ok {
			sc := sd.InstrumentationScope()
			ss = &tracepb.ScopeSpans{
				Scope:     &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version, Attributes: otlpAttrs(sc.Attributes.ToSlice())},
				SchemaUrl: sc.SchemaURL,
			}
			byScope[sk] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, otlpSpan(sd))
	}
	return out
}

func otlpResource(r *resource.Resource) *resourcepb.Resource {
	return &resourcepb.Resource{Attributes: otlpAttrs(r.Attributes())}
}

func otlpSpan(sd sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := sd.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	s := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Flags:                  spanFlags(sc.TraceFlags(), sd.Parent()),
		Name:                   sd.Name(),
		Kind:                   tracepb.Span_SpanKind(sd.SpanKind()), // same numbering
		StartTimeUnixNano:      uint64(max(0, sd.StartTime().UnixNano())),
		EndTimeUnixNano:        uint64(max(0, sd.EndTime().UnixNano())),
		Attributes:             otlpAttrs(sd.Attributes()),
		DroppedAttributesCount: uint32(max(0, sd.DroppedAttributes())),
		DroppedEventsCount:     uint32(max(0, sd.DroppedEvents())),
		DroppedLinksCount:      uint32(max(0, sd.DroppedLinks())),
		Status:                 otlpStatus(sd.Status()),
	}
	if p := sd.Parent().SpanID(); p.IsValid() {
		s.ParentSpanId = p[:]
	}
	for _, ev := range sd.Events() {
		s.Events = append(s.Events, &tracepb.Span_Event{
			Name:                   ev.Name,
			TimeUnixNano:           uint64(max(0, ev.Time.UnixNano())),
			Attributes:             otlpAttrs(ev.Attributes),
			DroppedAttributesCount: uint32(max(0, ev.DroppedAttributeCount)),
		})
	}
	for _, l := range sd.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		s.Links = append(s.Links, &tracepb.Span_Link{
			TraceId:                ltid[:],
			SpanId:                 lsid[:],
			TraceState:             l.SpanContext.TraceState().String(),
			Attributes:             otlpAttrs(l.Attributes),
			DroppedAttributesCount: uint32(max(0, l.DroppedAttributeCount)),
			Flags:                  spanFlags(l.SpanContext.TraceFlags(), l.SpanContext),
		})
	}
	return s
}

// spanFlags is the W3C trace flags plus whether the parent is remote, as
// OTLP 1.x carries them.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

func otlpStatus(st sdktrace.Status) *tracepb.Status {
	c := tracepb.Status_STATUS_CODE_UNSET
	switch st.Code {
	case codes.Ok:
		c = tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		c = tracepb.Status_STATUS_CODE_ERROR
	}
	return &tracepb.Status{Code: c, Message: st.Description}
}

func otlpAttrs(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: otlpValue(kv.Value)})
	}
	return out
}

func otlpValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOLSLICE:
		return otlpArray(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return otlpArray(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return otlpArray(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		return otlpArray(v.AsStringSlice(), attribute.StringValue)
	default:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.Emit()}}
	}
}

func otlpArray[T any](xs []T, value func(T) attribute.Value) *commonpb.AnyValue {
	arr := &commonpb.ArrayValue{Values: make([]*commonpb.AnyValue, len(xs))}
	for i, x := range xs {
		arr.Values[i] = otlpValue(value(x))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}
}
