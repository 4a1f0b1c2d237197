package tokenwirereceiver

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/stream"
)

// startStreams loads the stream probe and starts reading it.
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
	fields := []zap.Field{zap.Ints("ports", r.cfg.Streams.Ports)}
	for _, p := range tr.HookPoints() {
		summary := p.Choice.Summary()
		if p.Choice.Closer == nil {
			summary = "not attached: streams are opaque"
			if p.Name == "sock_recv_length" {
				summary = "not attached: no request details"
			}
		}
		fields = append(fields, zap.String(p.Name, summary))
	}
	r.set.Logger.Info("tokenwire stream probe attached", fields...)

	skipped := map[string]metric.AddOption{}
	for _, reason := range []string{skipNotStreamed, skipNoResponse, skipFiltered} {
		skipped[reason] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason)))
	}
	r.stStats = newStreamStats(&r.cfg.Streams, wallOffset(),
		func(reason string) { r.telemetry.ReceiverTokenwireStreamsSkipped.Add(ctx, 1, skipped[reason]) },
		func() { r.telemetry.ReceiverTokenwireStreamEvictions.Add(ctx, 1) })
	r.wg.Add(1)
	go readLoop(ctx, r, streamAttr, r.streams.Read, stream.ErrClosed, r.stStats.add)
	return nil
}

func (r *tokenwireReceiver) registerStreamTelemetry() error {
	tr := r.streams
	return errors.Join(
		r.registerRingTelemetry(streamAttr, "tw_st_socks",
			func() (uint64, error) { c, err := tr.Counters(); return c.RecordsLost, err },
			tr.Sockets),
		r.telemetry.RegisterReceiverTokenwireStreamsOpenCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(r.stStats.openCount()))
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

// expireIdle ends the streams that wrote nothing for streams.idle_timeout.
func (r *tokenwireReceiver) expireIdle() {
	var rec stream.Record
	for _, id := range r.stStats.idle(time.Now().Add(-r.cfg.Streams.IdleTimeout)) {
		ok, err := r.streams.Expire(id.Sock, &rec)
		if err != nil {
			r.set.Logger.Warn("expiring an idle stream", zap.Error(err))
			continue
		}
		if !ok || rec.ID != id {
			r.stStats.forget(id) // its socket is gone, or it moved on
			continue
		}
		r.stStats.add(&rec)
	}
}

// emitSpans sends the spans of streams that ended since the last call.
func (r *tokenwireReceiver) emitSpans(ctx context.Context) {
	r.nextMu.Lock()
	next := r.traces
	r.nextMu.Unlock()
	if r.stStats == nil {
		return
	}
	td := r.stStats.takeSpans()
	if next == nil || td.SpanCount() == 0 {
		return
	}
	if err := next.ConsumeTraces(ctx, td); err != nil {
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
