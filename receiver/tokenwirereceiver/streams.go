package tokenwirereceiver

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/histogram"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// startStreams loads the stream probe and starts reading it into the
// stream aggregator.
func (r *tokenwireReceiver) startStreams(ctx context.Context) error {
	open := r.streamOpen
	if open == nil {
		open = stream.Open
	}
	tr, err := open(stream.Config{
		Ports:           toPorts(r.cfg.Streams.Ports),
		MaxSockets:      uint32(r.cfg.Streams.MaxSockets),
		StateSlots:      uint32(r.cfg.Streams.StateSlots),
		RingBufferBytes: uint32(r.cfg.RingBufferSize),
		HookOrder:       r.cfg.hookOrder(),
		Coalesce:        r.cfg.Streams.Coalesce,
		FlushInterval:   r.cfg.Streams.FlushInterval,
		GapBounds:       stream.DefaultGapBounds,

		RequestCaptureBytes: uint32(r.cfg.Streams.RequestCapture),
		NoResponseBodies:    !r.cfg.Streams.ResponseDetails,
		TLS:                 r.cfg.Streams.probe(r.reportTLS),
		Clients:             r.cfg.Streams.Clients.probe(),
	})
	if err != nil {
		return err
	}
	r.streams = tr
	fields := []zap.Field{zap.Ints("ports", r.cfg.Streams.Ports), zap.String("state", tr.StateStorage()),
		zap.String("write_tails", tr.TailSource()), zap.String("tls", tlsSummary(tr, r.cfg.Streams.TLS.Enabled))}
	for _, p := range tr.HookPoints() {
		summary := p.Choice.Summary()
		if p.Choice.Closer == nil {
			summary = "not attached: no request details"
		}
		fields = append(fields, zap.String(p.Name, summary))
	}
	r.set.Logger.Info("tokenwire stream probe attached", fields...)

	skipped := map[string]metric.AddOption{}
	for _, reason := range streamagg.SkipReasons {
		skipped[reason] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason)))
	}
	pids := make([]uint32, len(r.cfg.Streams.Pids))
	for i, p := range r.cfg.Streams.Pids {
		pids[i] = uint32(p)
	}
	agg, err := streamagg.New(streamagg.Config{
		Coalesce:          r.cfg.Streams.Coalesce,
		MaxOpen:           r.cfg.Streams.MaxSockets,
		MaxPaths:          r.cfg.Streams.MaxPaths,
		MaxModels:         r.cfg.Streams.MaxModels,
		Routes:            r.cfg.Streams.Routes,
		MaxSeries:         r.cfg.Streams.MaxSeries,
		SeriesExpiry:      r.cfg.Streams.SeriesExpiry,
		Pids:              pids,
		ProcessNames:      r.cfg.Streams.ProcessNames,
		Providers:         r.cfg.Streams.providers(),
		NoResponseDetails: !r.cfg.Streams.ResponseDetails,
		Spans:             r.cfg.Streams.Spans,
		MaxSpans:          r.cfg.Streams.MaxPendingSpans,
		ClientHosts:       r.cfg.Streams.Clients.hosts(),
		OnSkip:            func(reason string) { r.telemetry.ReceiverTokenwireStreamsSkipped.Add(ctx, 1, skipped[reason]) },
		OnEvict:           func() { r.telemetry.ReceiverTokenwireStreamEvictions.Add(ctx, 1) },
		OnOverflow:        func() { r.telemetry.ReceiverTokenwireStreamSeriesOverflow.Add(ctx, 1) },
		OnSpanDrop:        func() { r.telemetry.ReceiverTokenwireSpansDropped.Add(ctx, 1) },
	}, procinfo.NewCache(4096))
	if err != nil {
		tr.Close()
		r.streams = nil
		return err
	}
	r.stAgg = agg
	r.wg.Add(1)
	go readLoop(ctx, r, streamAttr, tr.Read, stream.ErrClosed, r.stAgg.Add)
	return nil
}

func (r *tokenwireReceiver) registerStreamTelemetry() error {
	tr, agg := r.streams, r.stAgg
	noRoom := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "no_room")))
	stale := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "stale")))
	return errors.Join(
		r.registerRingTelemetry(streamAttr, "tw_st_socks",
			func() (uint64, error) { c, err := tr.Counters(); return c.RecordsLost, err },
			tr.Sockets),
		r.telemetry.RegisterReceiverTokenwireConnectionsUntrackedCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := tr.Counters()
			if err != nil {
				return err
			}
			o.Observe(int64(c.TrackFailed), noRoom)
			o.Observe(int64(c.Stale), stale)
			return nil
		}),
		r.telemetry.RegisterReceiverTokenwirePayloadsUnreadCallback(
			observeCounter(tr, func(c stream.Counters) uint64 { return c.Unread })),
		r.telemetry.RegisterReceiverTokenwirePayloadsShedCallback(
			observeCounter(tr, func(c stream.Counters) uint64 { return c.Shed })),
		r.telemetry.RegisterReceiverTokenwireWriteTailsFromUserCallback(
			observeCounter(tr, func(c stream.Counters) uint64 { return c.TailFromUser })),
		r.registerTLSTelemetry(tr),
		r.telemetry.RegisterReceiverTokenwireStreamsOpenCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(agg.OpenCount()))
			return nil
		}),
		r.telemetry.RegisterReceiverTokenwireProgramsAttachedCallback(func(_ context.Context, o metric.Int64Observer) error {
			for _, p := range tr.HookPoints() {
				if p.Choice.Closer != nil {
					o.Observe(1, metric.WithAttributeSet(attribute.NewSet(streamAttr,
						attribute.String("hook", string(p.Choice.Kind)), attribute.String("hook_point", p.Name))))
				}
			}
			return nil
		}),
	)
}

// observeCounter observes one of the stream probe's kernel counters.
func observeCounter(tr *stream.Tracer, field func(stream.Counters) uint64) metric.Int64Callback {
	return func(_ context.Context, o metric.Int64Observer) error {
		c, err := tr.Counters()
		if err != nil {
			return err
		}
		o.Observe(int64(field(c)))
		return nil
	}
}

// recordStreams records the stream sums through the MetricsBuilder, one
// resource per process, and returns what adds each process's histograms
// beside them.
func (r *tokenwireReceiver) recordStreams(now pcommon.Timestamp) []func(pmetric.Metrics) {
	snap := r.stAgg.Snapshot()
	var adds []func(pmetric.Metrics)
	for i := 0; i < len(snap); {
		j := i
		for j < len(snap) && snap[j].Key.PID == snap[i].Key.PID {
			j++
		}
		series := snap[i:j]
		res := r.resource
		if series[0].Key.PID != 0 { // the overflow series has no process
			res = r.processResource(series[0].Process)
		}
		servers, clients := splitClients(series)
		for _, s := range servers {
			k := s.Key
			opts := sumOptions(k)
			r.mb.RecordTokenwireStreamChunksDataPoint(now, s.Chunks, int64(k.Port), k.Method, k.Route, modeAttr(k.Mode), opts...)
			r.mb.RecordTokenwireStreamBytesDataPoint(now, s.Bytes, int64(k.Port), k.Method, k.Route, modeAttr(k.Mode), opts...)
		}
		r.mb.EmitForResource(metadata.WithResource(res))
		adds = append(adds, func(md pmetric.Metrics) {
			ms := r.scopeOf(md, res).Metrics()
			addStreamHistograms(ms, servers, r.startTime, now)
			addClientHistograms(ms, clients, r.startTime, now)
		})
		i = j
	}
	return adds
}

// addStreamHistograms appends the stream histograms of series (one
// process's) to ms: a point per series, and per error type of
// request.duration and token type of token usage.
func addStreamHistograms(ms pmetric.MetricSlice, series []streamagg.SeriesSnapshot, start, now pcommon.Timestamp) {
	for _, def := range []*histogramDef{&ttftDef, &requestDurationDef, &chunkIntervalDef, &timePerOutputTokenDef} {
		points := newHistogramPoints(ms, def, start, now)
		for _, s := range series {
			if attrs, ok := points.add(streamHistogram(&s.Series, def)); ok {
				putStreamAttrs(attrs, s.Key)
			}
			if def != &requestDurationDef {
				continue
			}
			for _, e := range s.Errors {
				if attrs, ok := points.add(e.Duration); ok {
					putStreamAttrs(attrs, s.Key)
					attrs.PutStr(genai.AttrErrorType, e.Type)
				}
			}
		}
	}
	addTokenPoints(newHistogramPoints(ms, &tokenUsageDef, start, now), series, putStreamAttrs)
}

// addTokenPoints adds the input and output token usage of each series to
// tokens, a point per token type, with the series' attributes (put).
func addTokenPoints(tokens *histogramPoints, series []streamagg.SeriesSnapshot, put func(pcommon.Map, streamagg.SeriesKey)) {
	for _, s := range series {
		for _, t := range []struct {
			h   *histogram.Histogram
			typ string
		}{{s.InputTokens, genai.TokenTypeInput}, {s.OutputTokens, genai.TokenTypeOutput}} {
			if attrs, ok := tokens.add(t.h); ok {
				put(attrs, s.Key)
				attrs.PutStr(genai.AttrTokenType, t.typ)
			}
		}
	}
}

// putStreamAttrs sets a stream series' attributes on a histogram point,
// as sumOptions does on the sums: the GenAI ones only when known. A client
// series has server.address and no HTTP attributes (the client
// conventions have none).
func putStreamAttrs(attrs pcommon.Map, k streamagg.SeriesKey) {
	attrs.PutInt(genai.AttrServerPort, int64(k.Port))
	if !k.Client {
		attrs.PutStr(genai.AttrHTTPRequestMethod, k.Method)
		attrs.PutStr(genai.AttrHTTPRoute, k.Route)
	}
	attrs.PutStr(attrStreamMode, k.Mode.String())
	for _, kv := range [...]struct{ key, value string }{
		{genai.AttrServerAddress, k.ServerAddress},
		{genai.AttrRequestModel, k.Model},
		{genai.AttrOperationName, k.Operation},
		{genai.AttrProviderName, k.Provider},
		{genai.AttrResponseModel, k.ResponseModel},
		{attrStreamFormat, formatAttr(k)},
	} {
		if kv.value != "" {
			attrs.PutStr(kv.key, kv.value)
		}
	}
}

// sumOptions are a series' conditional attributes for the generated sums.
func sumOptions(k streamagg.SeriesKey) []metadata.MetricAttributeOption {
	var opts []metadata.MetricAttributeOption
	if k.Model != "" {
		opts = append(opts, metadata.WithGenAiRequestModelMetricAttribute(k.Model))
	}
	if k.Operation != "" {
		opts = append(opts, metadata.WithGenAiOperationNameMetricAttribute(k.Operation))
	}
	if k.Provider != "" {
		opts = append(opts, metadata.WithGenAiProviderNameMetricAttribute(k.Provider))
	}
	if k.ResponseModel != "" {
		opts = append(opts, metadata.WithGenAiResponseModelMetricAttribute(k.ResponseModel))
	}
	if f := formatAttr(k); f != "" {
		opts = append(opts, metadata.WithTokenwireStreamFormatMetricAttribute(f))
	}
	return opts
}

// Attribute keys of tokenwire's own namespace on stream metrics and spans.
const (
	attrStreamMode   = "tokenwire.stream.mode"
	attrStreamFormat = "tokenwire.stream.format"
)

// formatAttr is tokenwire.stream.format for a series: its wire format in
// http and tls modes; nothing in opaque mode, where no body is read.
func formatAttr(k streamagg.SeriesKey) string {
	if k.Mode == streamagg.ModeOpaque {
		return ""
	}
	return k.Format.String()
}

// streamHistogram is the histogram of s that def describes.
func streamHistogram(s *streamagg.Series, def *histogramDef) *histogram.Histogram {
	switch def {
	case &requestDurationDef:
		return s.Duration
	case &chunkIntervalDef:
		return s.Interval
	case &timePerOutputTokenDef:
		return s.TPOT
	}
	return s.TTFT
}

func modeAttr(m streamagg.Mode) metadata.AttributeTokenwireStreamMode {
	switch m {
	case streamagg.ModeHTTP:
		return metadata.AttributeTokenwireStreamModeHTTP
	case streamagg.ModeTLS:
		return metadata.AttributeTokenwireStreamModeTLS
	}
	return metadata.AttributeTokenwireStreamModeOpaque
}

// processResource describes the process that wrote streams, as it was
// when its first stream was counted: host, pid, executable and container.
func (r *tokenwireReceiver) processResource(p procinfo.Process) pcommon.Resource {
	rb := r.mb.NewResourceBuilder()
	if r.hostName != "" {
		rb.SetHostName(r.hostName)
	}
	if p.PID != 0 {
		rb.SetProcessPid(int64(p.PID))
	}
	if p.Executable != "" {
		rb.SetProcessExecutableName(p.Executable)
	}
	if p.ContainerID != "" {
		rb.SetContainerID(p.ContainerID)
	}
	return rb.Emit()
}
