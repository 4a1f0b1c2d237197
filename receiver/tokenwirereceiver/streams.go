package tokenwirereceiver

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

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
		RingBufferBytes: uint32(r.cfg.RingBufferSize),
		HookOrder:       r.cfg.hookOrder(),
		Coalesce:        r.cfg.Streams.Coalesce,
		FlushInterval:   r.cfg.Streams.FlushInterval,
		GapBounds:       stream.DefaultGapBounds,
	})
	if err != nil {
		return err
	}
	r.streams = tr
	fields := []zap.Field{zap.Ints("ports", r.cfg.Streams.Ports), zap.String("state", tr.StateStorage())}
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
	r.wall = wallOffset()
	agg, err := streamagg.New(streamagg.Config{
		MaxOpen:      r.cfg.Streams.MaxSockets,
		MaxPaths:     r.cfg.Streams.MaxPaths,
		MaxModels:    r.cfg.Streams.MaxModels,
		Routes:       r.cfg.Streams.Routes,
		MaxSeries:    r.cfg.Streams.MaxSeries,
		SeriesExpiry: r.cfg.Streams.SeriesExpiry,
		Pids:         pids,
		ProcessNames: r.cfg.Streams.ProcessNames,
		Spans:        r.cfg.Streams.Spans,
		OnSkip:       func(reason string) { r.telemetry.ReceiverTokenwireStreamsSkipped.Add(ctx, 1, skipped[reason]) },
		OnEvict:      func() { r.telemetry.ReceiverTokenwireStreamEvictions.Add(ctx, 1) },
		OnOverflow:   func() { r.telemetry.ReceiverTokenwireStreamSeriesOverflow.Add(ctx, 1) },
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
		for _, s := range series {
			k := s.Key
			r.mb.RecordTokenwireStreamChunksDataPoint(now, s.Chunks, int64(k.Port), k.Method, k.Route, k.Model, modeAttr(k.Mode))
			r.mb.RecordTokenwireStreamBytesDataPoint(now, s.Bytes, int64(k.Port), k.Method, k.Route, k.Model, modeAttr(k.Mode))
		}
		r.mb.EmitForResource(metadata.WithResource(res))
		adds = append(adds, func(md pmetric.Metrics) {
			ms := r.scopeOf(md, res).Metrics()
			for _, def := range []*histogramDef{&ttftDef, &requestDurationDef, &chunkIntervalDef} {
				points := newHistogramPoints(ms, def, r.startTime, now)
				for _, s := range series {
					if attrs, ok := points.add(streamHistogram(&s.Series, def)); ok {
						attrs.PutInt("server.port", int64(s.Key.Port))
						attrs.PutStr("http.request.method", s.Key.Method)
						attrs.PutStr("http.route", s.Key.Route)
						attrs.PutStr("gen_ai.request.model", s.Key.Model)
						attrs.PutStr("tokenwire.stream.mode", s.Key.Mode.String())
					}
				}
			}
		})
		i = j
	}
	return adds
}

// streamHistogram is the histogram of s that def describes.
func streamHistogram(s *streamagg.Series, def *histogramDef) *histogram.Histogram {
	switch def {
	case &requestDurationDef:
		return s.Duration
	case &chunkIntervalDef:
		return s.Interval
	}
	return s.TTFT
}

func modeAttr(m streamagg.Mode) metadata.AttributeTokenwireStreamMode {
	if m == streamagg.ModeHTTP {
		return metadata.AttributeTokenwireStreamModeHTTP
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

// traceData turns span records into one SERVER span each, under their
// process's resource, joining the caller's trace when the request carried
// a traceparent.
func (r *tokenwireReceiver) traceData(spans []streamagg.Span) ptrace.Traces {
	td := ptrace.NewTraces()
	byProcess := map[procinfo.Process]ptrace.SpanSlice{}
	for i := range spans {
		s := &spans[i]
		out, ok := byProcess[s.Process]
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			r.processResource(s.Process).MoveTo(rs.Resource())
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(metadata.ScopeName)
			ss.Scope().SetVersion(r.set.BuildInfo.Version)
			out = ss.Spans()
			byProcess[s.Process] = out
		}
		r.putSpan(out.AppendEmpty(), s)
	}
	return td
}

func (r *tokenwireReceiver) wallTime(ns uint64) pcommon.Timestamp {
	return pcommon.Timestamp(int64(ns) + r.wall)
}

func (r *tokenwireReceiver) putSpan(sp ptrace.Span, s *streamagg.Span) {
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], rand.Uint64()|1)
	sp.SetSpanID(id)
	switch tp := s.TraceParent; {
	case tp.Valid && r.cfg.Streams.TraceParent == TraceParentParent:
		sp.SetTraceID(tp.TraceID)
		sp.SetParentSpanID(tp.SpanID)
	default:
		var tid [16]byte
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64()|1)
		sp.SetTraceID(tid)
		if tp.Valid && r.cfg.Streams.TraceParent == TraceParentLink {
			l := sp.Links().AppendEmpty()
			l.SetTraceID(tp.TraceID)
			l.SetSpanID(tp.SpanID)
		}
	}
	sp.SetKind(ptrace.SpanKindServer)
	if s.Method != "" {
		sp.SetName(s.Method + " " + s.Route)
	} else {
		sp.SetName("stream " + strconv.Itoa(int(s.Port)))
	}
	sp.SetStartTimestamp(r.wallTime(s.Start))
	sp.SetEndTimestamp(r.wallTime(s.End))
	a := sp.Attributes()
	a.EnsureCapacity(14) // the most a span gets: grown once, not per attribute
	if s.Method != "" {
		a.PutStr("http.request.method", s.Method)
		a.PutStr("url.path", s.Path)
		a.PutStr("http.route", s.Route)
	}
	if s.IsHTTP {
		a.PutInt("http.response.status_code", int64(s.Status))
		if s.Status >= 500 {
			sp.Status().SetCode(ptrace.StatusCodeError)
		}
	}
	if s.Model != "" {
		a.PutStr("gen_ai.request.model", s.Model)
	}
	a.PutInt("server.port", int64(s.Port))
	if s.Client.IsValid() {
		a.PutStr("client.address", s.Client.Addr().Unmap().String())
		a.PutInt("client.port", int64(s.Client.Port()))
	}
	a.PutStr("tokenwire.stream.mode", s.Mode.String())
	a.PutStr("tokenwire.stream.end_reason", s.EndReason.String())
	a.PutInt("tokenwire.stream.chunks", s.Chunks)
	a.PutInt("tokenwire.stream.bytes", s.Bytes)
	if s.FirstChunk != 0 {
		a.PutDouble("gen_ai.response.time_to_first_chunk", float64(s.FirstChunk-s.Start)/1e9)
		ev := sp.Events().AppendEmpty()
		ev.SetName("first_chunk")
		ev.SetTimestamp(r.wallTime(s.FirstChunk))
	}
	a.PutDouble("tokenwire.stream.chunk.interval.max", float64(s.GapMax)/1e9)
}
