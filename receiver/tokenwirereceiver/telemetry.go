package tokenwirereceiver

import (
	"context"
	"errors"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerTelemetry registers the callbacks of the receiver's observable
// self-telemetry: which capabilities are up, and what each started probe
// reports about its ring and maps.
func (r *tokenwireReceiver) registerTelemetry() error {
	status := slices.Clone(r.status)
	errs := []error{r.telemetry.RegisterReceiverTokenwireCapabilityUpCallback(func(_ context.Context, o metric.Int64Observer) error {
		for _, s := range status {
			if s.up {
				o.Observe(1, s.attrs)
			} else {
				o.Observe(0, s.attrs)
			}
		}
		return nil
	})}
	if r.streams != nil {
		errs = append(errs, r.registerStreamTelemetry())
	}
	if r.xdp != nil {
		errs = append(errs, r.registerXDPTelemetry())
	}
	tr := r.handshakes
	if tr == nil {
		return errors.Join(errs...)
	}
	hookAttrs := metric.WithAttributeSet(attribute.NewSet(handshakeAttr, attribute.String("hook", string(tr.Hook().Kind))))
	startNotSeen := metric.WithAttributeSet(attribute.NewSet(handshakeAttr, attribute.String("reason", "start_not_seen")))
	return errors.Join(append(errs,
		r.registerRingTelemetry(handshakeAttr, "tw_hs_syn_sent",
			func() (uint64, error) { c, err := tr.Counters(); return c.RecordsLost, err },
			tr.TrackedSockets),
		// Client handshakes that ended without a start to measure from:
		// their durations and failures are missing from the metrics, and a
		// growing count under load means tw_hs_syn_sent is evicting.
		r.telemetry.RegisterReceiverTokenwireConnectionsUntrackedCallback(func(_ context.Context, o metric.Int64Observer) error {
			c, err := tr.Counters()
			if err != nil {
				return err
			}
			o.Observe(int64(c.Untracked), startNotSeen)
			return nil
		}),
		r.telemetry.RegisterReceiverTokenwireProgramsAttachedCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, hookAttrs)
			return nil
		}),
	)...)
}

// registerRingTelemetry reports what every record-writing probe has: the
// records its kernel side lost and the entries in its per-socket map.
func (r *tokenwireReceiver) registerRingTelemetry(capability attribute.KeyValue, mapName string,
	lost func() (uint64, error), entries func() (int, error)) error {
	attrs := metric.WithAttributeSet(attribute.NewSet(capability))
	mapAttrs := metric.WithAttributeSet(attribute.NewSet(capability, attribute.String("map", mapName)))
	return errors.Join(
		r.telemetry.RegisterReceiverTokenwireRecordsLostCallback(func(_ context.Context, o metric.Int64Observer) error {
			n, err := lost()
			if err != nil {
				return err
			}
			o.Observe(int64(n), attrs)
			return nil
		}),
		r.telemetry.RegisterReceiverTokenwireMapEntriesCallback(func(_ context.Context, o metric.Int64Observer) error {
			n, err := entries()
			if err != nil {
				return err
			}
			o.Observe(int64(n), mapAttrs)
			return nil
		}),
	)
}
