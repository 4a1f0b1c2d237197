package handshakeagg

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/handshake"
)

func event(role handshake.Role, port uint16, d time.Duration) *handshake.Event {
	local := netip.MustParseAddrPort("192.0.2.1:40000")
	remote := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), port)
	if role == handshake.RoleServer {
		local, remote = netip.AddrPortFrom(local.Addr(), port), netip.MustParseAddrPort("192.0.2.2:40000")
	}
	return &handshake.Event{Role: role, Duration: d, HasDuration: d > 0, Local: local, Remote: remote}
}

func TestTotalsByRolePortAndReason(t *testing.T) {
	a := New()
	a.Add(event(handshake.RoleClient, 443, time.Millisecond))
	a.Add(event(handshake.RoleClient, 443, 3*time.Millisecond))
	a.Add(event(handshake.RoleServer, 8000, 50*time.Microsecond))
	refused := event(handshake.RoleClient, 443, 0)
	refused.Failed, refused.Errno = true, syscall.ECONNREFUSED
	a.Add(refused)
	a.Add(event(handshake.RoleServer, 8000, 0)) // no duration kept: not a series
	s := a.Snapshot()
	client := s.Durations[Key{Role: handshake.RoleClient, Port: 443}]
	if client == nil || client.Count != 2 || client.Sum != 0.004 {
		t.Fatalf("client series %+v, want 2 handshakes summing to 4 ms", client)
	}
	if server := s.Durations[Key{Role: handshake.RoleServer, Port: 8000}]; server == nil || server.Count != 1 {
		t.Fatalf("server series %+v, want 1 handshake", server)
	}
	if n := s.Failures[FailureKey{Key{Role: handshake.RoleClient, Port: 443}, Refused}]; n != 1 || len(s.Failures) != 1 {
		t.Fatalf("failures %v, want one refused", s.Failures)
	}
	if a.unmeasured != 1 {
		t.Fatalf("%d unmeasured, want 1", a.unmeasured)
	}
	// The snapshot is a copy.
	a.Add(event(handshake.RoleClient, 443, time.Millisecond))
	if client.Count != 2 {
		t.Fatal("the snapshot changed after it was taken")
	}
}

// A port scan cannot grow the series without bound: ports beyond
// MaxSeries fold into port 0.
func TestSeriesAreBounded(t *testing.T) {
	a := New()
	for p := range MaxSeries + 100 {
		a.Add(event(handshake.RoleServer, uint16(p+1), time.Millisecond))
	}
	s := a.Snapshot()
	if len(s.Durations) != MaxSeries+1 {
		t.Fatalf("%d series, want %d and the overflow", len(s.Durations), MaxSeries)
	}
	if h := s.Durations[Key{Role: handshake.RoleServer}]; h == nil || h.Count != 100 {
		t.Fatalf("overflow series %+v, want the 100 beyond the cap", h)
	}
}

func TestReasons(t *testing.T) {
	for errno, want := range map[syscall.Errno]string{
		0: Aborted, syscall.ECONNREFUSED: Refused, syscall.ETIMEDOUT: Timeout, syscall.ECONNRESET: Reset,
		syscall.EPIPE: Reset, syscall.EHOSTUNREACH: Unreachable, syscall.EACCES: Other,
	} {
		if got := Reason(errno); got != want {
			t.Errorf("Reason(%v) = %s, want %s", errno, got, want)
		}
	}
}
