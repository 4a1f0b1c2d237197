package tokenwirereceiver

import (
	"sync"
	"syscall"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/tokenwire/tokenwire/internal/handshake"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// maxHandshakeSeries bounds the attribute sets kept per handshake metric.
// Ports beyond it are folded into server.port 0, so a port scan cannot make
// the receiver's memory or the backend's cardinality grow without bound.
const maxHandshakeSeries = 4096

type handshakeKey struct {
	role handshake.Role
	port uint16
	ipv6 bool
}

type failureKey struct {
	handshakeKey
	errType metadata.AttributeErrorType
}

// handshakeStats aggregates handshake events between two emissions. Totals
// are cumulative since Start, as Prometheus and OTLP cumulative sums expect.
type handshakeStats struct {
	mu        sync.Mutex
	durations map[handshakeKey]*histogram
	failures  map[failureKey]int64
	// unmeasured counts server handshakes whose duration the kernel did
	// not keep (SYN cookies without timestamps).
	unmeasured int64
}

func newHandshakeStats() *handshakeStats {
	return &handshakeStats{
		durations: map[handshakeKey]*histogram{},
		failures:  map[failureKey]int64{},
	}
}

func keyOf(ev *handshake.Event) handshakeKey {
	addr := ev.Local.Addr()
	return handshakeKey{role: ev.Role, port: ev.ServerPort(), ipv6: addr.Is6() && !addr.Is4In6()}
}

// add folds one event into the totals. It allocates only for a new series.
func (s *handshakeStats) add(ev *handshake.Event) {
	k := keyOf(ev)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.Failed {
		fk := failureKey{handshakeKey: k, errType: errorType(ev.Errno)}
		if _, ok := s.failures[fk]; !ok && len(s.failures) >= maxHandshakeSeries {
			fk.port = 0
		}
		s.failures[fk]++
		return
	}
	if !ev.HasDuration {
		s.unmeasured++
		return
	}
	h, ok := s.durations[k]
	if !ok {
		if len(s.durations) >= maxHandshakeSeries {
			k.port = 0
			h = s.durations[k]
		}
		if h == nil {
			h = newHistogram(&handshakeDurationDef)
			s.durations[k] = h
		}
	}
	h.observe(handshakeDurationDef.bounds, ev.Duration.Seconds())
}

// record writes the failure totals into mb and the duration histograms
// into ms.
func (s *handshakeStats) record(mb *metadata.MetricsBuilder, ms pmetric.MetricSlice, start, now pcommon.Timestamp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, n := range s.failures {
		mb.RecordTokenwireTCPHandshakeFailuresDataPoint(now, n, roleAttr(k.role), k.errType, int64(k.port), netAttr(k.ipv6))
	}
	if len(s.durations) == 0 {
		return
	}
	dps := newHistogramMetric(ms, &handshakeDurationDef).Histogram().DataPoints()
	for k, h := range s.durations {
		attrs := h.appendTo(dps, &handshakeDurationDef, start, now).Attributes()
		attrs.PutStr("network.tcp.handshake.role", k.role.String())
		attrs.PutInt("server.port", int64(k.port))
		attrs.PutStr("network.type", netAttr(k.ipv6).String())
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

// errorType maps the socket error of a failed handshake to error.type.
func errorType(errno syscall.Errno) metadata.AttributeErrorType {
	switch errno {
	case 0:
		return metadata.AttributeErrorTypeAborted
	case syscall.ECONNREFUSED:
		return metadata.AttributeErrorTypeRefused
	case syscall.ETIMEDOUT:
		return metadata.AttributeErrorTypeTimeout
	case syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE:
		return metadata.AttributeErrorTypeReset
	case syscall.EHOSTUNREACH, syscall.ENETUNREACH:
		return metadata.AttributeErrorTypeUnreachable
	}
	return metadata.AttributeErrorTypeOTHER
}
