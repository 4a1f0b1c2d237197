package tokenwirereceiver

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/tlsprobe"
)

// reportTLS logs what became of a TLS library in a process serving a
// watched port; the probe reports each outcome once per file, so a
// library that cannot be probed is logged once however many processes
// map it.
func (r *tokenwireReceiver) reportTLS(t tlsprobe.Target) {
	fields := []zap.Field{zap.String("path", t.Path), zap.String("library", string(t.Library)), zap.Uint32("pid", t.PID)}
	if t.Version != "" {
		fields = append(fields, zap.String("version", t.Version))
	}
	switch {
	case t.Probed && t.SystemWide && t.PID == 0:
		r.set.Logger.Info("tokenwire TLS library probed for every process that maps it (streams.tls.system_wide): each of its calls traps into the kernel, and those of selected processes are read as plaintext (mode tls)", fields...)
	case t.Probed:
		r.set.Logger.Info("tokenwire TLS library probed: its streams are read as plaintext (mode tls)", fields...)
	case t.PID == 0:
		r.set.Logger.Warn("tokenwire cannot probe this file for every process (streams.tls.system_wide): the processes using it are probed one by one",
			append(fields, zap.String("reason", string(t.Reason)), zap.Error(t.Err))...)
	case t.Reason == tlsprobe.ReasonExcluded:
		r.set.Logger.Info("tokenwire TLS library not probed (streams.tls leaves it out): its TLS streams are timed from record headers (mode opaque)", fields...)
	default:
		r.set.Logger.Warn("tokenwire cannot probe this TLS library: its TLS streams are timed from record headers (mode opaque)",
			append(fields, zap.String("reason", string(t.Reason)), zap.Error(t.Err))...)
	}
}

// tlsSummary says how TLS streams are read, for the startup log line.
func tlsSummary(tr *stream.Tracer, enabled bool) string {
	switch {
	case !enabled:
		return "opaque (streams.tls.enabled is false)"
	case tr.TLSError() != nil:
		return "opaque: " + tr.TLSError().Error()
	}
	return "plaintext through uprobes where a TLS library is probed"
}

// tlsResult is a target's result attribute.
func tlsResult(t tlsprobe.Target) string {
	switch {
	case t.Probed:
		return "probed"
	case t.Reason == tlsprobe.ReasonExcluded:
		return "excluded"
	}
	return "unprobeable"
}

// registerTLSTelemetry reports the TLS libraries probed and not, the
// probe failures by reason, and how TLS connections were read.
func (r *tokenwireReceiver) registerTLSTelemetry(tr *stream.Tracer) error {
	plain := metric.WithAttributeSet(attribute.NewSet(attribute.String("mode", "tls")))
	opaque := metric.WithAttributeSet(attribute.NewSet(attribute.String("mode", "opaque")))
	err := r.telemetry.RegisterReceiverTokenwireTLSConnectionsCallback(func(_ context.Context, o metric.Int64Observer) error {
		c, err := tr.Counters()
		if err != nil {
			return err
		}
		o.Observe(int64(c.TLSPlain), plain)
		o.Observe(int64(c.TLS-min(c.TLSPlain, c.TLS)), opaque)
		return nil
	})
	if err != nil {
		return err
	}
	err = r.telemetry.RegisterReceiverTokenwireTLSProbeFailuresCallback(func(_ context.Context, o metric.Int64Observer) error {
		for k, n := range tr.TLSFailures() {
			o.Observe(int64(n), metric.WithAttributeSet(attribute.NewSet(
				attribute.String("reason", string(k.Reason)), attribute.String("library", string(k.Library)))))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return r.telemetry.RegisterReceiverTokenwireTLSTargetsCallback(func(_ context.Context, o metric.Int64Observer) error {
		type key struct {
			result  string
			library tlsprobe.Library
		}
		counts := map[key]int64{}
		for _, t := range tr.TLSTargets() {
			counts[key{tlsResult(t), t.Library}]++
		}
		for k, n := range counts {
			o.Observe(n, metric.WithAttributeSet(attribute.NewSet(
				attribute.String("result", k.result), attribute.String("library", string(k.library)))))
		}
		return nil
	})
}
