package xdp

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// TestVethDropsBlocklistedSources: traffic from blocked sources is dropped
// and counted packet for packet and byte for byte; traffic from the other
// addresses of the same host passes, in every attach mode.
func TestVethDropsBlocklistedSources(t *testing.T) {
	for _, tc := range []struct{ mode, want string }{
		{ModeAuto, ModeNative}, // veth has native XDP
		{ModeNative, ModeNative},
		{ModeGeneric, ModeGeneric},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			p := newPair(t)
			f, err := openIn(t, p.b, Config{
				Interfaces: []string{p.vb.Name},
				Mode:       tc.mode,
				Blocklist:  []string{"192.0.2.3", "2001:db8::3/128"},
			})
			if err != nil {
				t.Fatal(err)
			}
			att := f.Attachments()
			if len(att) != 1 || att[0].Mode != tc.want || att[0].Ifindex != p.vb.Index || att[0].Detached {
				t.Fatalf("Attachments() = %+v, want %s on %s", att, tc.want, p.vb.Name)
			}
			if ids := xdpOn(t, p.b, p.vb); len(ids) != 1 {
				t.Fatalf("XDP programs on %s: %v", p.vb.Name, ids)
			}

			drop0 := counter(t, f, p.vb.Name, ActionDrop, ReasonBlocklist)
			pass0 := counter(t, f, p.vb.Name, ActionPass, ReasonNone)
			const n = 300
			for _, src := range []struct {
				addr    netip.Addr
				blocked bool
			}{{addrA1, false}, {addrA3, true}, {addrA61, false}, {addrA63, true}} {
				p.sender(t, src.addr).send(t, n)
			}
			waitFor(t, "the unblocked packets", func() bool {
				return p.sink.count(addrA1) == n && p.sink.count(addrA61) == n
			})
			wantDrop := Counter{Interface: p.vb.Name, Action: ActionDrop, Reason: ReasonBlocklist,
				Packets: drop0.Packets + 2*n, Bytes: drop0.Bytes + n*frameLen4 + n*frameLen6}
			waitFor(t, "the drop counter", func() bool {
				return counter(t, f, p.vb.Name, ActionDrop, ReasonBlocklist).Packets >= wantDrop.Packets
			})
			time.Sleep(50 * time.Millisecond) // a late extra packet would be a bug: let it show
			if got := counter(t, f, p.vb.Name, ActionDrop, ReasonBlocklist); got != wantDrop {
				t.Errorf("drop/blocklist = %+v, want %+v", got, wantDrop)
			}
			if got := counter(t, f, p.vb.Name, ActionDrop, ReasonMalformed); got.Packets != 0 {
				t.Errorf("drop/malformed = %+v, want none", got)
			}
			pass := counter(t, f, p.vb.Name, ActionPass, ReasonNone)
			if pass.Packets-pass0.Packets < 2*n || pass.Bytes-pass0.Bytes < n*frameLen4+n*frameLen6 {
				t.Errorf("pass/none went from %+v to %+v, want at least %d more packets", pass0, pass, 2*n)
			}
			for _, src := range []netip.Addr{addrA3, addrA63} {
				if got := p.sink.count(src); got != 0 {
					t.Errorf("%d packets from blocked %s arrived", got, src)
				}
			}

			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if ids := xdpOn(t, p.b, p.vb); len(ids) != 0 {
				t.Errorf("XDP programs left on %s after Close: %v", p.vb.Name, ids)
			}
			// Fail open: with the filter gone, the blocked source gets through.
			p.sender(t, addrA3).send(t, 10)
			waitFor(t, "packets from the formerly blocked source", func() bool { return p.sink.count(addrA3) == 10 })
		})
	}
}

// TestVethFileEditWhileTrafficFlows edits the blocklist file while two
// sources send steadily: once the watcher reports the reload done, not one
// packet sent from the newly blocked source afterwards arrives, the other
// source is untouched, and every packet is either received or counted as
// dropped. A bad edit keeps the old list; removing the entry lets the
// source through again.
func TestVethFileEditWhileTrafficFlows(t *testing.T) {
	p := newPair(t)
	path := filepath.Join(t.TempDir(), "blocklist.txt")
	// Replaced atomically, as config management does.
	writeFile := func(content string) { writeAtomic(t, path, content) }
	writeFile("# blocked\n192.0.2.3\n")
	reloaded := make(chan error, 16)
	f, err := openIn(t, p.b, Config{
		Interfaces:    []string{p.vb.Name},
		BlocklistFile: path,
		WatchInterval: 10 * time.Millisecond,
		OnReload:      func(err error) { reloaded <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	waitReload := func() error {
		t.Helper()
		select {
		case err := <-reloaded:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("the watcher did not reload within 5 s")
		}
		return nil
	}

	s4, s1 := p.sender(t, addrA4), p.sender(t, addrA1)
	var (
		stop, pause4 atomic.Bool
		done         = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			if !pause4.Load() {
				if err := s4.sendOne(); err != nil {
					t.Error(err)
					return
				}
			}
			if err := s1.sendOne(); err != nil {
				t.Error(err)
				return
			}
			if i%8 == 7 {
				time.Sleep(200 * time.Microsecond)
			}
		}
	}()
	defer func() { stop.Store(true); <-done }()

	waitFor(t, "traffic from .4 to pass", func() bool { return p.sink.count(addrA4) >= 100 })
	drop0 := counter(t, f, p.vb.Name, ActionDrop, ReasonBlocklist).Packets
	// accounted waits until every packet sent from .4 so far was received
	// or counted as dropped, and returns the received sequence numbers.
	accounted := func() []uint64 {
		t.Helper()
		var got []uint64
		waitFor(t, "every packet from .4 to be received or dropped", func() bool {
			got = p.sink.received(addrA4)
			dropped := counter(t, f, p.vb.Name, ActionDrop, ReasonBlocklist).Packets - drop0
			return uint64(len(got))+dropped == s4.next.Load()
		})
		return got
	}

	writeFile("# blocked\n192.0.2.3\n192.0.2.4/32\n")
	if err := waitReload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	// Every packet numbered from here on was written after the reload was
	// reported done.
	cut := s4.next.Load()
	waitFor(t, "300 more packets from .4", func() bool { return s4.next.Load() >= cut+300 })

	// A bad edit: the old list (with .4) stays.
	writeFile("192.0.2.3\n192.0.2.4\nnot-an-address\n")
	if err := waitReload(); err == nil || !strings.Contains(err.Error(), path+":3:") {
		t.Errorf("bad file: reload error %v, want one naming %s:3", err, path)
	}
	if st := f.Stats(); st.ReloadErrors != 1 || st.Reloads != 1 {
		t.Errorf("Stats() = %+v, want 1 reload and 1 error", st)
	}
	waitFor(t, "100 more packets from .4", func() bool { return s4.next.Load() >= cut+400 })

	// Pause .4 and settle the account before unblocking, so that no packet
	// is in flight across the next reload.
	pause4.Store(true)
	got4 := accounted()
	blockedUntil := s4.next.Load()
	for _, seq := range got4 {
		if seq >= cut {
			t.Errorf("packet %d from .4 arrived; it was sent after the reload that blocks .4 was done (from %d on)", seq, cut)
		}
	}
	if len(got4) > int(cut) {
		t.Errorf("%d packets from .4 arrived, more than the %d sent before the block", len(got4), cut)
	}

	// Unblock again: every packet from then on arrives.
	writeFile("192.0.2.3\n")
	if err := waitReload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	pause4.Store(false)
	waitFor(t, "200 packets from .4 to pass again", func() bool { return p.sink.count(addrA4) >= len(got4)+200 })
	stop.Store(true)
	<-done
	got4 = accounted()
	total4 := s4.next.Load()
	var afterUnblock uint64
	for _, seq := range got4 {
		if seq >= blockedUntil {
			afterUnblock++
		}
	}
	if afterUnblock != total4-blockedUntil {
		t.Errorf("%d of the %d packets from .4 sent after the unblocking reload arrived", afterUnblock, total4-blockedUntil)
	}
	waitFor(t, "every packet from .1", func() bool { return p.sink.count(addrA1) == int(s1.next.Load()) })
	t.Logf("from .4: %d sent, %d received, %d dropped; blocked from packet %d (reload done) to %d; "+
		"from .1: %d sent, all received", total4, len(got4), total4-uint64(len(got4)), cut, blockedUntil, s1.next.Load())
}

// TestOpenCloseLeavesNothing: repeated Open/Close cycles on two
// interfaces leave no XDP program on them and no program or map loaded.
func TestOpenCloseLeavesNothing(t *testing.T) {
	p := newPair(t)
	base, err := bpftest.NewBaseline()
	if err != nil {
		t.Fatal(err)
	}
	lo := p.b.Link(t, "lo")
	for i := range 10 {
		f, err := openIn(t, p.b, Config{Interfaces: []string{p.vb.Name, "lo"}, Blocklist: testBlocklist})
		if err != nil {
			t.Fatal(err)
		}
		if a := f.Attachments(); len(a) != 2 || a[0].Mode != ModeNative || a[1].Mode != ModeGeneric {
			t.Fatalf("cycle %d: Attachments() = %+v, want native on the veth and generic on lo", i, a)
		}
		if len(xdpOn(t, p.b, p.vb)) != 1 || len(xdpOn(t, p.b, lo)) != 1 {
			t.Fatalf("cycle %d: not attached", i)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if ids, idsLo := xdpOn(t, p.b, p.vb), xdpOn(t, p.b, lo); len(ids)+len(idsLo) != 0 {
			t.Fatalf("cycle %d: left on the veth %v, on lo %v", i, ids, idsLo)
		}
	}
	if left, err := base.WaitGone(2 * time.Second); err != nil || !left.Empty() {
		t.Errorf("left loaded: %v (%v)", left, err)
	}

	// Failures after loading (a missing interface) leave nothing either.
	if _, err := openIn(t, p.b, Config{Interfaces: []string{p.vb.Name, "nosuch0"}}); err == nil ||
		!strings.Contains(err.Error(), `interface "nosuch0"`) {
		t.Errorf("missing interface: %v", err)
	}
	path := filepath.Join(t.TempDir(), "bad.txt")
	if err := os.WriteFile(path, []byte("192.0.2.1\n192.0.2.256\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openIn(t, p.b, Config{Interfaces: []string{p.vb.Name}, BlocklistFile: path}); err == nil ||
		!strings.Contains(err.Error(), path+":2:") {
		t.Errorf("bad blocklist file: %v", err)
	}
	if ids := xdpOn(t, p.b, p.vb); len(ids) != 0 {
		t.Errorf("failed Opens left %v on the veth", ids)
	}
	if left, err := base.WaitGone(2 * time.Second); err != nil || !left.Empty() {
		t.Errorf("failed Opens left %v (%v)", left, err)
	}
}

// TestInterfaceDisappears: deleting an interface under a running filter
// detaches its program in the kernel; the filter notices, keeps its
// counters, and closes without error.
func TestInterfaceDisappears(t *testing.T) {
	p := newPair(t)
	f, err := openIn(t, p.b, Config{Interfaces: []string{p.vb.Name}, Blocklist: []string{"192.0.2.3"}})
	if err != nil {
		t.Fatal(err)
	}
	p.sender(t, addrA3).send(t, 5)
	waitFor(t, "5 drops", func() bool { return counter(t, f, p.vb.Name, ActionDrop, ReasonBlocklist).Packets == 5 })

	p.b.IP(t, "link", "del", p.vb.Name) // takes the peer with it
	waitFor(t, "the link to go defunct", func() bool {
		a := f.Attachments()
		return len(a) == 1 && a[0].Detached
	})
	if c := counter(t, f, p.vb.Name, ActionDrop, ReasonBlocklist); c.Packets != 5 {
		t.Errorf("counters after the interface went: %+v", c)
	}
	if err := f.Reload(prefixes("192.0.2.4")); err != nil {
		t.Errorf("Reload after the interface went: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("Close after the interface went: %v", err)
	}
}
