package handshake

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/bpftest"
)

func defaultConfig(ports ...uint16) Config {
	return Config{
		Ports:             ports,
		MaxTrackedSockets: 16384,
		RingBufferBytes:   1 << 20,
		HookOrder:         bpftest.HookOrder(),
	}
}

// collector reads every event of a tracer in the background.
type collector struct {
	mu     sync.Mutex
	events []Event
	done   chan struct{}
}

func collect(t *testing.T, tr *Tracer) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		var ev Event
		for {
			if err := tr.Read(&ev); err != nil {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("Read: %v", err)
				}
				return
			}
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { tr.Close(); <-c.done })
	return c
}

// waitFor polls until match returns want events or the deadline passes,
// then waits a little longer to catch any extra event, and returns them.
func (c *collector) waitFor(t *testing.T, want int, match func(*Event) bool) []Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	var got []Event
	for {
		got = c.matching(match)
		if len(got) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // an extra event would be a bug: give it time to show
	return c.matching(match)
}

func (c *collector) matching(match func(*Event) bool) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Event
	for i := range c.events {
		if match(&c.events[i]) {
			out = append(out, c.events[i])
		}
	}
	return out
}

func listen(t *testing.T, network, addr string) (net.Listener, uint16) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, uint16(ln.Addr().(*net.TCPAddr).Port)
}

func acceptAll(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func TestClientAndServerHandshakesAreCountedExactly(t *testing.T) {
	bpftest.Require(t)
	for _, tc := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"tcp6", "[::1]:0"}} {
		t.Run(tc.network, func(t *testing.T) {
			ln, port := listen(t, tc.network, tc.addr)
			acceptAll(ln)
			tr, err := Open(defaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("hook: %s", tr.Hook().Summary())
			c := collect(t, tr)

			const n = 50
			clientPorts := map[uint16]bool{}
			for range n {
				conn, err := net.Dial(tc.network, ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				clientPorts[uint16(conn.LocalAddr().(*net.TCPAddr).Port)] = true
				conn.Close()
			}
			onPort := func(role Role) func(*Event) bool {
				return func(e *Event) bool { return e.Role == role && e.ServerPort() == port }
			}
			clients := c.waitFor(t, n, onPort(RoleClient))
			servers := c.waitFor(t, n, onPort(RoleServer))
			servers = withoutLostChildren(t, servers)
			if len(clients) != n || len(servers) != n {
				t.Fatalf("recorded %d client and %d server handshakes, want %d of each", len(clients), len(servers), n)
			}
			for _, evs := range [][]Event{clients, servers} {
				for _, e := range evs {
					if e.Failed || !e.HasDuration || e.Duration <= 0 || e.Duration > time.Second {
						t.Errorf("%s handshake %+v: want a successful one with 0 < duration < 1s", e.Role, e)
					}
					wantNet := map[string]bool{"tcp4": e.Local.Addr().Is4(), "tcp6": e.Local.Addr().Is6()}
					if !wantNet[tc.network] {
						t.Errorf("event address family %v does not match %s", e.Local, tc.network)
					}
				}
			}
			for _, e := range clients {
				if !clientPorts[e.Local.Port()] {
					t.Errorf("client event from local port %d that the test did not dial from", e.Local.Port())
				}
				if e.PID != uint32(syscall.Getpid()) {
					t.Errorf("client event pid %d, want this process %d", e.PID, syscall.Getpid())
				}
			}
		})
	}
}

// withoutLostChildren drops the failed server handshakes of connections
// that also have a successful one. When a connection's ACK and its next
// segment (here the client's FIN, sent at once) are processed on two CPUs
// at the same time, the kernel builds the child socket twice and closes
// the one that lost the race (inet_ehash_nolisten), a SYN_RECV -> CLOSE
// that the inet_sock_set_state tracepoint reports and the tracer passes on
// as a failed server handshake; the aggregation does not count it
// (handshakeagg.LostChildWindow). Only such duplicates are dropped; any
// other extra event still fails the test.
func withoutLostChildren(t *testing.T, servers []Event) []Event {
	t.Helper()
	ok := map[netip.AddrPort]bool{}
	for _, e := range servers {
		if !e.Failed {
			ok[e.Remote] = true
		}
	}
	var out []Event
	for _, e := range servers {
		if e.Failed && ok[e.Remote] {
			t.Logf("failed server handshake of a connection that also succeeded (a lost child socket): %+v", e)
			continue
		}
		out = append(out, e)
	}
	return out
}

func TestRefusedConnectIsOneFailure(t *testing.T) {
	bpftest.Require(t)
	ln, port := listen(t, "tcp4", "127.0.0.1:0")
	ln.Close() // nothing listens there now: the SYN is answered with RST

	tr, err := Open(defaultConfig(port))
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, tr)
	if _, err := net.Dial("tcp4", ln.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial error %v, want ECONNREFUSED", err)
	}
	got := c.waitFor(t, 1, func(e *Event) bool { return e.ServerPort() == port })
	if len(got) != 1 {
		t.Fatalf("recorded %d events for the refused port, want 1: %+v", len(got), got)
	}
	if e := got[0]; e.Role != RoleClient || !e.Failed || e.Errno != syscall.ECONNREFUSED || e.HasDuration {
		t.Fatalf("event %+v, want a failed client handshake with ECONNREFUSED", e)
	}
}

// backlogListener listens with a backlog of 1 and never accepts unless told.
func backlogListener(t *testing.T) (fd int, addr *net.TCPAddr) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}
}

// fillAcceptQueue connects until a connect no longer completes: from then
// on the listener drops SYNs. It returns the connections it made.
func fillAcceptQueue(t *testing.T, addr *net.TCPAddr) {
	t.Helper()
	for i := 0; i < 10; i++ {
		conn, err := net.DialTimeout("tcp4", addr.String(), 200*time.Millisecond)
		if err != nil {
			return // this SYN was dropped: the queue is full
		}
		t.Cleanup(func() { conn.Close() })
	}
	t.Fatal("accept queue of a backlog-1 listener never filled")
}

// TestSlowHandshakeMatchesConnectTime: a connect whose first SYN is
// dropped (the listener's accept queue is full) and sent again about 1 s
// later is one handshake, timed from the first SYN: over 900 ms, with the
// retransmit counted, and inside the connect() call that made it. How much
// shorter it is than the call is how late the kernel woke the caller
// after ESTABLISHED, which is the machine's (milliseconds in a loaded
// guest), not tokenwire's: logged, not asserted.
func TestSlowHandshakeMatchesConnectTime(t *testing.T) {
	bpftest.Require(t)
	fd, addr := backlogListener(t)
	tr, err := Open(defaultConfig(uint16(addr.Port)))
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, tr)
	fillAcceptQueue(t, addr)

	took, local := slowConnect(t, fd, addr)
	got := c.waitFor(t, 1, func(e *Event) bool { return e.Role == RoleClient && e.Local.Port() == local })
	if len(got) != 1 {
		t.Fatalf("recorded %d handshakes for the slow connect, want 1", len(got))
	}
	e := got[0]
	t.Logf("connect() took %v, recorded %v (%v shorter), SYN retransmits %d", took, e.Duration, took-e.Duration, e.Retransmits)
	if e.Duration < 900*time.Millisecond {
		t.Errorf("recorded duration %v, want over 900ms: from the first SYN", e.Duration)
	}
	if e.Duration > took {
		t.Errorf("recorded duration %v is longer than the connect() call around it (%v)", e.Duration, took)
	}
	if e.Retransmits < 1 {
		t.Errorf("recorded %d SYN retransmits, want at least 1", e.Retransmits)
	}
}

// slowConnect makes one connect to a listener whose accept queue is full:
// the SYN is dropped, and room is made (one accept) before it is sent
// again about 1 s later. It returns the time connect() took and the local
// port.
func slowConnect(t *testing.T, lfd int, addr *net.TCPAddr) (time.Duration, uint16) {
	t.Helper()
	type result struct {
		took  time.Duration
		local uint16
		err   error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			done <- result{err: err}
			return
		}
		sa := &syscall.SockaddrInet4{Port: addr.Port, Addr: [4]byte{127, 0, 0, 1}}
		start := time.Now()
		err = syscall.Connect(fd, sa)
		took := time.Since(start)
		if err != nil {
			syscall.Close(fd)
			done <- result{err: err}
			return
		}
		local, _ := syscall.Getsockname(fd)
		t.Cleanup(func() { syscall.Close(fd) })
		done <- result{took: took, local: uint16(local.(*syscall.SockaddrInet4).Port)}
	}()
	time.Sleep(300 * time.Millisecond)
	nfd, _, err := syscall.Accept(lfd)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(nfd)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.took, r.local
}

// TestUnansweredSynsLeaveNoState: 3000 connects whose SYNs a full accept
// queue drops are tracked while in flight, and once closed leave nothing
// tracked and one aborted client handshake each.
func TestUnansweredSynsLeaveNoState(t *testing.T) {
	bpftest.Require(t)
	_, addr := backlogListener(t)
	tr, err := Open(defaultConfig(uint16(addr.Port)))
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, tr)
	fillAcceptQueue(t, addr)
	time.Sleep(300 * time.Millisecond) // let the filling connects' events arrive
	before := len(c.matching(func(*Event) bool { return true }))
	// The filling connects completed, which ends their tracking. Should
	// one still be tracked (its completion not seen), it is not the
	// flood's state: the flood is held to what was tracked before it.
	base, err := tr.TrackedSockets()
	if err != nil {
		t.Fatal(err)
	}
	if base != 0 {
		t.Logf("%d sockets tracked before the flood: %s", base, trackedSockets(t, tr))
	}

	const n = 3000
	fds := make([]int, 0, n)
	defer func() {
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}()
	sa := &syscall.SockaddrInet4{Port: addr.Port, Addr: [4]byte{127, 0, 0, 1}}
	for range n {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		if err := syscall.Connect(fd, sa); err != syscall.EINPROGRESS {
			t.Fatalf("non-blocking connect: %v, want EINPROGRESS", err)
		}
	}
	inFlight, err := tr.TrackedSockets()
	if err != nil {
		t.Fatal(err)
	}
	if inFlight < base+n {
		t.Fatalf("%d sockets tracked during the flood, want at least %d", inFlight, base+n)
	}
	for _, fd := range fds {
		syscall.Close(fd)
	}
	fds = nil
	var left int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if left, err = tr.TrackedSockets(); err != nil || left <= base {
			break
		}
	}
	if err != nil || left != base {
		t.Fatalf("%d sockets still tracked after every SYN_SENT socket closed, %d before the flood (err %v): %s", left, base, err, trackedSockets(t, tr))
	}
	aborted := c.waitFor(t, before+n, func(e *Event) bool { return true })[before:]
	for _, e := range aborted {
		if !e.Failed || e.Errno != 0 || e.Role != RoleClient {
			t.Errorf("event %+v, want a client handshake aborted by close (errno 0)", e)
			break
		}
	}
	if len(aborted) != n {
		t.Errorf("%d aborted handshakes recorded, want %d", len(aborted), n)
	}
	counters, err := tr.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if counters.RecordsLost != 0 {
		t.Errorf("%d records lost", counters.RecordsLost)
	}
}

// trackedSockets describes the client sockets tr tracks: who connected
// and how long ago, beside this test's own pid.
func trackedSockets(t *testing.T, tr *Tracer) string {
	t.Helper()
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return err.Error()
	}
	var (
		key uint64
		st  bpf.HandshakeSynState
		out []string
	)
	it := tr.maps.TwHsSynSent.Iterate()
	for it.Next(&key, &st) {
		out = append(out, fmt.Sprintf("pid %d connected %v ago", st.Pid, time.Duration(now.Nano()-int64(st.StartNs))))
	}
	if err := it.Err(); err != nil {
		out = append(out, err.Error())
	}
	return fmt.Sprintf("[%s] (this test is pid %d)", strings.Join(out, "; "), os.Getpid())
}
