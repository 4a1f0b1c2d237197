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

// A failed server handshake of a connection that also succeeded within
// LostChildWindow, in either order, is the child socket that lost the
// kernel's two-CPU race, not a failure; any other waits out the window
// and counts, and Settle counts what is still held.
func TestLostChildIsNoFailure(t *testing.T) {
	clock := time.Unix(1000, 0)
	a := New()
	a.now = func() time.Time { return clock }
	fail := func(remote string) *handshake.Event {
		ev := event(handshake.RoleServer, 8000, 0)
		ev.Remote, ev.Failed = netip.MustParseAddrPort(remote), true
		return ev
	}
	ok := func(remote string) *handshake.Event {
		ev := event(handshake.RoleServer, 8000, time.Millisecond)
		ev.Remote = netip.MustParseAddrPort(remote)
		return ev
	}
	failures := func() int64 {
		return a.Snapshot().Failures[FailureKey{Key{Role: handshake.RoleServer, Port: 8000}, Aborted}]
	}
	a.Add(fail("192.0.2.2:1")) // lost the race, reported first
	a.Add(ok("192.0.2.2:1"))
	a.Add(ok("192.0.2.2:2"))
	a.Add(fail("192.0.2.2:2")) // lost the race, reported second
	a.Add(fail("192.0.2.2:3")) // a real failure
	if n := failures(); n != 0 {
		t.Fatalf("%d failures inside the window, want 0 (held)", n)
	}
	clock = clock.Add(LostChildWindow)
	if n := failures(); n != 1 {
		t.Fatalf("%d failures after the window, want 1", n)
	}
	a.Add(fail("192.0.2.2:2")) // the window has passed: a failure again
	a.Settle()
	if n := failures(); n != 2 {
		t.Fatalf("%d failures after Settle, want 2", n)
	}
	if s := a.Snapshot().Durations[Key{Role: handshake.RoleServer, Port: 8000}]; s == nil || s.Count != 2 {
		t.Fatalf("server durations %+v, want the 2 successes", s)
	}
	if len(a.held) != 0 || len(a.established) != 0 {
		t.Fatalf("held %d, remembered %d: want nothing after the window", len(a.held), len(a.established))
	}
}

// Held and remembered connections stay bounded under a flood.
func TestLostChildStateIsBounded(t *testing.T) {
	a := New()
	for i := range 3 * maxHeld {
		ev := event(handshake.RoleServer, 8000, time.Millisecond)
		ev.Remote = netip.AddrPortFrom(ev.Remote.Addr(), uint16(i))
		a.Add(ev)
		ev = event(handshake.RoleServer, 8001, 0)
		ev.Remote, ev.Failed = netip.AddrPortFrom(ev.Remote.Addr(), uint16(i)), true
		a.Add(ev)
	}
	if len(a.held) > maxHeld || len(a.established) > maxHeld {
		t.Fatalf("held %d, remembered %d: want at most %d each", len(a.held), len(a.established), maxHeld)
	}
	a.Settle()
	n := a.Snapshot().Failures[FailureKey{Key{Role: handshake.RoleServer, Port: 8001}, Aborted}]
	if n != 3*maxHeld {
		t.Fatalf("%d failures on port 8001, want all %d (none matches a success)", n, 3*maxHeld)
	}
}
