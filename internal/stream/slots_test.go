package stream

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/probe"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// TestStateSlots: where the kernel has BPF atomics, connections keep their
// state in slots, and those whose slot another holds in socket storage;
// either way every stream is measured exactly, and a closed connection's
// slot is freed for the next. With one slot, all connections but one at a
// time take the socket storage way, and every connection reuses the slot
// its predecessor freed. Where the kernel lacks atomics (5.10, 5.11), no
// slot is used.
func TestStateSlots(t *testing.T) {
	bpftest.Require(t)
	if !probe.HaveAtomics() {
		tr, err := Open(testConfig(1))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		if tr.inSlots {
			t.Fatalf("slots in use (%s) on a kernel without BPF atomics", tr.StateStorage())
		}
		t.Logf("no BPF atomics here: state in %s", tr.StateStorage())
		return
	}
	for _, slots := range []uint32{1, DefaultStateSlots} {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) {
			const concurrent, sequential, events = 40, 10, 6
			srv := &teststack.SSEServer{Think: 10 * time.Millisecond, Interval: 10 * time.Millisecond, Events: events, HeadersFirst: true}
			addr, port := serve(t, srv)
			cfg := testConfig(port)
			cfg.StateSlots = slots
			tr, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := record(t, tr)
			if tr.StateStorage() != "socket storage, behind slots" {
				t.Fatalf("state in %s, want slots (the hooks: %v)", tr.StateStorage(), tr.HookPoints())
			}
			// Kept alive after their streams: their slots stay held.
			pool := &http.Transport{MaxConnsPerHost: concurrent, MaxIdleConnsPerHost: concurrent}
			if err := teststack.FetchAll(&http.Client{Transport: pool}, concurrent, "GET", "http://"+addr+"/", ""); err != nil {
				t.Fatal(err)
			}
			// A connection whose stream ended before another's began
			// carried that one too.
			socks := map[uint64]bool{}
			for _, e := range requireCompleted(t, rec.ends(t, concurrent), concurrent) {
				socks[e.ID.Sock] = true
			}
			conns := len(socks)
			owners := len(heldSlots(t, tr))
			tracked, err := tr.Sockets()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d connections open: %d tracked, %d in slots", conns, tracked, owners)
			if want := min(int(slots), conns); owners > want || owners < want-want/8 || tracked != conns {
				t.Errorf("%d connections open: %d tracked, %d in slots; want all tracked and %d in slots (a few fewer where their hashes collide)",
					conns, tracked, owners, want)
			}
			pool.CloseIdleConnections()
			waitSlotsFree(t, tr)
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			for range sequential {
				if err := teststack.Fetch(client, "GET", "http://"+addr+"/", ""); err != nil {
					t.Fatal(err)
				}
			}
			ends := requireCompleted(t, rec.ends(t, concurrent+sequential), concurrent+sequential)
			wantBytes := uint64(5) // the terminator
			for _, sz := range srv.Written()[0].Sizes {
				wantBytes += uint64(sz)
			}
			for _, e := range ends {
				if e.Stats.Chunks != events || e.Stats.Bytes != wantBytes || e.Reason != EndTerminator {
					t.Errorf("stream %+v: %d chunks, %d bytes, end %v; want %d, %d, terminator",
						e.ID, e.Stats.Chunks, e.Stats.Bytes, e.Reason, events, wantBytes)
				}
			}
			waitSlotsFree(t, tr)
		})
	}
}

// waitSlotsFree fails the test unless every slot is free and zeroed
// within 3s (the connections' closes reach the server's sockets).
func waitSlotsFree(t *testing.T, tr *Tracer) {
	t.Helper()
	var held []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if held = heldSlots(t, tr); len(held) == 0 {
			return
		}
	}
	t.Errorf("slots still held after every connection closed: %s", strings.Join(held, ", "))
}

// heldSlots lists the slots of tw_st_slots that name an owner, and
// whether their state is zeroed as a freed slot's must be.
func heldSlots(t *testing.T, tr *Tracer) []string {
	t.Helper()
	var (
		key   uint32
		value []byte
		held  []string
	)
	it := tr.maps.TwStSlots.Iterate()
	for it.Next(&key, &value) {
		owner := binary.NativeEndian.Uint64(value)
		zero := true
		for _, b := range value[8:] {
			zero = zero && b == 0
		}
		if owner != 0 || !zero {
			held = append(held, fmt.Sprintf("slot %d: owner %#x, state zeroed %v", key, owner, zero))
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return held
}

// TestStateSlotsSized: StateSlots 0 keeps every connection's state in
// socket storage, and a count that is not a power of two, or above
// MaxStateSlots, is refused before anything loads.
func TestStateSlotsSized(t *testing.T) {
	bpftest.Require(t)
	cfg := testConfig(1)
	cfg.StateSlots = 0
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := tr.StateStorage()
	tr.Close()
	if got != "socket storage" && !strings.HasPrefix(got, "map") {
		t.Fatalf("state_slots 0: state in %q, want socket storage (or the map, without typed hooks)", got)
	}
	for _, n := range []uint32{1000, MaxStateSlots * 2} {
		cfg.StateSlots = n
		tr, err := Open(cfg)
		if err == nil {
			tr.Close()
			t.Fatalf("state slots %d: opened", n)
		}
		if want := fmt.Sprintf("state slots: must be 0 or a power of two up to %d, got %d", MaxStateSlots, n); err.Error() != want {
			t.Fatalf("state slots %d: %q, want %q", n, err, want)
		}
	}
}
