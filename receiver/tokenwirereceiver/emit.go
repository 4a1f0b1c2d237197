package tokenwirereceiver

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

func (r *tokenwireReceiver) emitLoop(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.CollectionInterval)
	defer tick.Stop()
	// Spans go out every second rather than every collection interval, so
	// a trace backend shows a stream soon after it ended.
	spanTick := time.NewTicker(time.Second)
	defer spanTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if r.stAgg != nil {
				now := time.Now()
				r.stAgg.ExpireIdle(now.Add(-r.cfg.Streams.IdleTimeout))
				if n := r.stAgg.ExpireSeries(now); n > 0 {
					r.telemetry.ReceiverTokenwireStreamSeriesExpired.Add(ctx, int64(n))
				}
			}
			r.emit(ctx)
		case <-spanTick.C:
			r.emitSpans(ctx)
		}
	}
}

// emit sends the cumulative totals to the metrics pipeline, if there is one.
func (r *tokenwireReceiver) emit(ctx context.Context) {
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	r.nextMu.Lock()
	next := r.metrics
	r.nextMu.Unlock()
	if next == nil {
		return
	}
	md := r.metricsNow(pcommon.NewTimestampFromTime(time.Now()))
	if md.DataPointCount() == 0 {
		return
	}
	if err := next.ConsumeMetrics(ctx, md); err != nil {
		r.set.Logger.Warn("metrics pipeline refused tokenwire metrics", zap.Error(err))
	}
}

// metricsNow assembles one emission. Every resource (the host, then each
// process that wrote streams) gets its sums through the MetricsBuilder and
// its histograms beside them in the same scope.
func (r *tokenwireReceiver) metricsNow(now pcommon.Timestamp) pmetric.Metrics {
	var histograms []func(pmetric.Metrics)
	if r.hsAgg != nil {
		histograms = append(histograms, r.recordHandshakes(now))
	}
	if r.xdp != nil {
		r.recordXDP(now)
	}
	r.mb.EmitForResource(metadata.WithResource(r.resource))
	if r.stAgg != nil {
		histograms = append(histograms, r.recordStreams(now)...)
	}
	md := r.mb.Emit()
	for _, add := range histograms {
		add(md)
	}
	return md
}

// scopeOf returns the receiver's scope under res in md, adding the
// resource when the MetricsBuilder emitted no sum for it this time.
func (r *tokenwireReceiver) scopeOf(md pmetric.Metrics, res pcommon.Resource) pmetric.ScopeMetrics {
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		rm := rms.At(i)
		if rm.ScopeMetrics().Len() > 0 && rm.Resource().Attributes().Equal(res.Attributes()) {
			return rm.ScopeMetrics().At(0)
		}
	}
	rm := rms.AppendEmpty()
	rm.SetSchemaUrl(genai.SchemaURL)
	res.CopyTo(rm.Resource())
	sm := rm.ScopeMetrics().AppendEmpty()
	sm.Scope().SetName(metadata.ScopeName)
	sm.Scope().SetVersion(r.set.BuildInfo.Version)
	return sm
}

// emitSpans sends the spans of streams that ended since the last call.
func (r *tokenwireReceiver) emitSpans(ctx context.Context) {
	if r.stAgg == nil {
		return
	}
	// traceData copies what it needs, so the buffer goes back to the
	// aggregator at the next call.
	spans := r.stAgg.TakeSpans(r.spareSpans)
	r.spareSpans = spans
	r.nextMu.Lock()
	next := r.traces
	r.nextMu.Unlock()
	if next == nil || len(spans) == 0 {
		return
	}
	if err := next.ConsumeTraces(ctx, r.traceData(spans)); err != nil {
		r.set.Logger.Warn("traces pipeline refused tokenwire spans", zap.Error(err))
	}
}

// wallOffset is what to add to a kernel monotonic timestamp
// (bpf_ktime_get_ns, CLOCK_MONOTONIC) to get Unix nanoseconds.
func wallOffset() int64 {
	var ts unix.Timespec
	before := time.Now()
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return before.UnixNano() - ts.Nano()
}
