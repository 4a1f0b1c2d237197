package tokenwirereceiver

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"

	"github.com/tokenwire/tokenwire/internal/handshake"
	"github.com/tokenwire/tokenwire/internal/handshakeagg"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// startHandshakes loads the handshake probe and starts reading it.
func (r *tokenwireReceiver) startHandshakes(ctx context.Context) error {
	tr, err := handshake.Open(handshake.Config{
		Ports:             toPorts(r.cfg.Handshake.Ports),
		MaxTrackedSockets: uint32(r.cfg.Handshake.MaxTrackedSockets),
		RingBufferBytes:   uint32(r.cfg.RingBufferSize),
		HookOrder:         r.cfg.hookOrder(),
	})
	if err != nil {
		return err
	}
	r.handshakes = tr
	r.hsAgg = handshakeagg.New()
	ports := "all"
	if len(r.cfg.Handshake.Ports) > 0 {
		ports = fmt.Sprint(r.cfg.Handshake.Ports)
	}
	r.set.Logger.Info("tokenwire handshake probe attached", zap.String("hook", tr.Hook().Summary()), zap.String("ports", ports))
	r.wg.Add(1)
	go readLoop(ctx, r, handshakeAttr, tr.Read, handshake.ErrClosed, r.hsAgg.Add)
	return nil
}

// recordHandshakes records the failure totals through the MetricsBuilder
// (under the host resource, emitted next) and returns what adds the
// duration histograms beside them.
func (r *tokenwireReceiver) recordHandshakes(now pcommon.Timestamp) func(pmetric.Metrics) {
	snap := r.hsAgg.Snapshot()
	for k, n := range snap.Failures {
		r.mb.RecordTokenwireTCPHandshakeFailuresDataPoint(now, n, roleAttr(k.Role),
			metadata.MapAttributeErrorType[k.Reason], int64(k.Port), netAttr(k.IPv6))
	}
	return func(md pmetric.Metrics) {
		if len(snap.Durations) == 0 {
			return
		}
		points := newHistogramPoints(r.scopeOf(md, r.resource).Metrics(), &handshakeDurationDef, r.startTime, now)
		for k, h := range snap.Durations {
			if attrs, ok := points.add(h); ok {
				attrs.PutStr("network.tcp.handshake.role", k.Role.String())
				attrs.PutInt("server.port", int64(k.Port))
				attrs.PutStr("network.type", netAttr(k.IPv6).String())
			}
		}
	}
}

func roleAttr(r handshake.Role) metadata.AttributeNetworkTCPHandshakeRole {
	if r == handshake.RoleServer {
		return metadata.AttributeNetworkTCPHandshakeRoleServer
	}
	return metadata.AttributeNetworkTCPHandshakeRoleClient
}

func netAttr(ipv6 bool) metadata.AttributeNetworkType {
	if ipv6 {
		return metadata.AttributeNetworkTypeIpv6
	}
	return metadata.AttributeNetworkTypeIpv4
}
