package tokenwirereceiver

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/tokenwire/tokenwire/internal/xdp"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// xdpState is the receiver's XDP filter and what it remembers about it.
type xdpState struct {
	filter *xdp.Filter

	mu       sync.Mutex
	detached map[string]bool // interfaces already reported gone
}

// startXDP attaches the filter to the configured interfaces, to all of
// them or to none. A bad line in the blocklist file fails it with the file
// and line.
func (r *tokenwireReceiver) startXDP() error {
	st := &xdpState{detached: map[string]bool{}}
	cfg := r.cfg.XDP.filter()
	cfg.Logger = r.set.Logger
	f, err := xdp.Open(cfg)
	if err != nil {
		return err
	}
	st.filter = f
	r.xdp = st
	var where []string
	for _, a := range f.Attachments() {
		where = append(where, a.Interface+" ("+a.Mode+")")
	}
	stats := f.Stats()
	r.set.Logger.Info("tokenwire XDP filter attached", zap.Strings("interfaces", where),
		zap.Int("blocklist_ipv4", stats.Entries4), zap.Int("blocklist_ipv6", stats.Entries6),
		zap.Int("allowlist_ipv4", stats.Allow4), zap.Int("allowlist_ipv6", stats.Allow6))
	return nil
}

func (r *tokenwireReceiver) registerXDPTelemetry() error {
	st := r.xdp
	return errors.Join(
		r.telemetry.RegisterReceiverTokenwireXdpBlocklistEntriesCallback(func(_ context.Context, o metric.Int64Observer) error {
			s := st.filter.Stats()
			o.Observe(int64(s.Entries4), metric.WithAttributes(attribute.String("family", "ipv4")))
			o.Observe(int64(s.Entries6), metric.WithAttributes(attribute.String("family", "ipv6")))
			return nil
		}),
		r.telemetry.RegisterReceiverTokenwireXdpAllowlistEntriesCallback(func(_ context.Context, o metric.Int64Observer) error {
			s := st.filter.Stats()
			o.Observe(int64(s.Allow4), metric.WithAttributes(attribute.String("family", "ipv4")))
			o.Observe(int64(s.Allow6), metric.WithAttributes(attribute.String("family", "ipv6")))
			return nil
		}),
		r.telemetry.RegisterReceiverTokenwireXdpReloadsCallback(func(_ context.Context, o metric.Int64Observer) error {
			s := st.filter.Stats()
			o.Observe(int64(s.Reloads), metric.WithAttributes(attribute.String("result", "ok")))
			for _, reason := range xdp.FailureReasons {
				o.Observe(int64(s.ReloadErrorsByReason[reason]), metric.WithAttributes(
					attribute.String("result", "error"), attribute.String("reason", string(reason))))
			}
			return nil
		}),
		r.telemetry.RegisterReceiverTokenwireProgramsAttachedCallback(func(_ context.Context, o metric.Int64Observer) error {
			for _, a := range st.filter.Attachments() {
				if !a.Detached {
					o.Observe(1, metric.WithAttributeSet(attribute.NewSet(xdpAttr,
						attribute.String("hook", "xdp_"+a.Mode), attribute.String("interface", a.Interface))))
				}
			}
			return nil
		}),
	)
}

// recordXDP writes the filter's cumulative counters into mb, and logs an
// interface that went away since the last time (its counters stay).
func (r *tokenwireReceiver) recordXDP(now pcommon.Timestamp) {
	mb := r.mb
	st := r.xdp
	st.mu.Lock()
	for _, a := range st.filter.Attachments() {
		if a.Detached && !st.detached[a.Interface] {
			st.detached[a.Interface] = true
			r.set.Logger.Warn("XDP filter detached: the interface is gone", zap.String("interface", a.Interface))
		}
	}
	st.mu.Unlock()
	counters, err := st.filter.Counters()
	if err != nil {
		r.set.Logger.Warn("reading XDP counters", zap.Error(err))
		return
	}
	for _, c := range counters {
		action := metadata.AttributeTokenwireXdpActionPass
		if c.Action == xdp.ActionDrop {
			action = metadata.AttributeTokenwireXdpActionDrop
		}
		reason := metadata.AttributeTokenwireXdpReasonNone
		switch c.Reason {
		case xdp.ReasonBlocklist:
			reason = metadata.AttributeTokenwireXdpReasonBlocklist
		case xdp.ReasonMalformed:
			reason = metadata.AttributeTokenwireXdpReasonMalformed
		case xdp.ReasonAllowlist:
			reason = metadata.AttributeTokenwireXdpReasonAllowlist
		}
		mb.RecordTokenwireXdpPacketsDataPoint(now, int64(c.Packets), c.Interface, action, reason)
		mb.RecordTokenwireXdpBytesDataPoint(now, int64(c.Bytes), c.Interface, action, reason)
	}
}
