package stream

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/probe"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// TestStateSlots: where the kernel has BPF atomics, connections keep their
// state in slots, first tw_st_front's, then tw_st_slots', and those whose
// slots others hold in socket storage; either way every stream is
// measured exactly, and a closed connection's slots are freed for the
// next. With one slot in tw_st_slots, one of the connections whose front
// slot another holds takes it and the rest take the socket storage way,
// and every connection reuses the slots its predecessor freed. Where the
// kernel lacks atomics (5.10, 5.11), no slot is used.
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
			addr, tr, rec := serveWithSlots(t, srv, slots)
			if n := tr.maps.TwStFront.MaxEntries(); n != FrontSlots {
				t.Fatalf("tw_st_front has %d slots, want FrontSlots (%d)", n, FrontSlots)
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
			front, frontBad := slotOwners(t, tr.maps.TwStFront)
			back, backBad := slotOwners(t, tr.maps.TwStSlots)
			tracked, err := tr.Sockets()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d connections open: %d tracked, %d in front slots, %d in tw_st_slots", conns, tracked, len(front), len(back))
			if len(frontBad)+len(backBad) > 0 {
				t.Errorf("freed slots not zeroed: %v %v", frontBad, backBad)
			}
			for o := range front {
				if back[o] {
					t.Errorf("socket %#x holds a slot in both tables", o)
				}
			}
			for o := range front {
				if !socks[o] {
					t.Errorf("front slot held by %#x, not one of the streams' sockets", o)
				}
			}
			// Front slots: as many as the connections' hashes fall in
			// different ones (at least one); tw_st_slots: the rest, up
			// to its size (a few fewer where their hashes collide).
			if len(front) < 1 || len(front) > min(FrontSlots, conns) {
				t.Errorf("%d connections in %d front slots; want 1 to %d", conns, len(front), min(FrontSlots, conns))
			}
			if want := min(int(slots), conns-len(front)); len(back) > want || len(back) < want-want/8 || tracked != conns {
				t.Errorf("%d connections open: %d tracked, %d in front slots, %d in tw_st_slots; want all tracked and %d in tw_st_slots",
					conns, tracked, len(front), len(back), want)
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

// serveWithSlots serves srv and opens a tracer on its port with slots
// state slots, recording its records; it fails the test unless the
// connections' state is in slots.
func serveWithSlots(t *testing.T, srv *teststack.SSEServer, slots uint32) (string, *Tracer, *recorder) {
	t.Helper()
	addr, port := serve(t, srv)
	cfg := testConfig(port)
	cfg.StateSlots = slots
	tr, rec := traceWith(t, cfg)
	if tr.StateStorage() != "socket storage, behind slots" {
		t.Fatalf("state in %s, want slots (the hooks: %v)", tr.StateStorage(), tr.HookPoints())
	}
	return addr, tr, rec
}

// waitSlotsFree fails the test unless every slot of both tables is free
// and zeroed within 3s (the connections' closes reach the server's
// sockets).
func waitSlotsFree(t *testing.T, tr *Tracer) {
	t.Helper()
	var held []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		held = nil
		for name, m := range map[string]*ebpf.Map{"tw_st_front": tr.maps.TwStFront, "tw_st_slots": tr.maps.TwStSlots} {
			owners, bad := slotOwners(t, m)
			for o := range owners {
				held = append(held, fmt.Sprintf("%s: a slot held by %#x", name, o))
			}
			held = append(held, bad...)
		}
		if len(held) == 0 {
			return
		}
	}
	t.Errorf("slots still held after every connection closed: %s", strings.Join(held, ", "))
}

// slotOwners returns the owners of m's held slots (m is tw_st_front or
// tw_st_slots), and the free slots whose state is not zeroed as a freed
// slot's must be.
func slotOwners(t *testing.T, m *ebpf.Map) (owners map[uint64]bool, bad []string) {
	t.Helper()
	var (
		key   uint32
		value []byte
	)
	owners = map[uint64]bool{}
	it := m.Iterate()
	for it.Next(&key, &value) {
		owner := binary.NativeEndian.Uint64(value)
		zero := true
		for _, b := range value[8:] {
			zero = zero && b == 0
		}
		if owner != 0 {
			owners[owner] = true
		} else if !zero {
			bad = append(bad, fmt.Sprintf("slot %d: free, state not zeroed", key))
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return owners, bad
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
	got, front := tr.StateStorage(), tr.maps.TwStFront.MaxEntries()
	tr.Close()
	if got != "socket storage" && !strings.HasPrefix(got, "map") {
		t.Fatalf("state_slots 0: state in %q, want socket storage (or the map, without typed hooks)", got)
	}
	if front != 1 {
		t.Fatalf("state_slots 0: tw_st_front has %d slots, want 1 (unused)", front)
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

// TestStateSlotsKeepState: a connection keeps its state where it has it.
// Connections whose front slot another holds keep theirs in tw_st_slots
// (one slot here) or socket storage; once every front slot's holder has
// closed, their next requests must not claim the freed front slots and
// start afresh: the streams on each connection keep its generation,
// their sequence numbers follow on, and the probe counts each connection
// once.
func TestStateSlotsKeepState(t *testing.T) {
	bpftest.Require(t)
	if !probe.HaveAtomics() {
		t.Logf("no BPF atomics here: no slots (TestStateSlots checks that none is used)")
		return
	}
	const conns, events = 40, 6
	srv := &teststack.SSEServer{Think: 10 * time.Millisecond, Interval: 10 * time.Millisecond, Events: events, HeadersFirst: true}
	addr, tr, rec := serveWithSlots(t, srv, 1)
	type keptConn struct {
		c  net.Conn
		br *bufio.Reader
		id ID // its first stream's
	}
	get := func(k *keptConn) error {
		req, err := http.NewRequest("GET", "http://"+addr+"/", nil)
		if err != nil {
			return err
		}
		if err := req.Write(k.c); err != nil {
			return err
		}
		resp, err := http.ReadResponse(k.br, req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	// One request at a time, so that each new stream is the connection's.
	seen := map[ID]bool{}
	kept := make([]*keptConn, conns)
	for i := range kept {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		kept[i] = &keptConn{c: c, br: bufio.NewReader(c)}
		if err := get(kept[i]); err != nil {
			t.Fatal(err)
		}
		var fresh []ID
		for id := range rec.endIDs(i + 1) {
			if !seen[id] {
				seen[id] = true
				fresh = append(fresh, id)
			}
		}
		if len(fresh) != 1 {
			t.Fatalf("connection %d's request: new streams %v, want one", i, fresh)
		}
		kept[i].id = fresh[0]
	}
	front, _ := slotOwners(t, tr.maps.TwStFront)
	// With one slot in tw_st_slots, a second connection whose front slot
	// another holds keeps its state in socket storage: both ways are
	// exercised.
	if back, _ := slotOwners(t, tr.maps.TwStSlots); len(back) != 1 || conns-len(front) < 2 {
		t.Fatalf("%d connections: %d in front slots, %d in tw_st_slots; the test needs one in tw_st_slots and one more in socket storage",
			conns, len(front), len(back))
	}
	var others []*keptConn
	for _, k := range kept {
		if front[k.id.Sock] {
			k.c.Close()
		} else {
			others = append(others, k)
		}
	}
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if held, _ := slotOwners(t, tr.maps.TwStFront); len(held) == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("front slots still held after their connections closed: %v", held)
		}
	}
	for _, k := range others {
		if err := get(k); err != nil {
			t.Fatal(err)
		}
	}
	streams := rec.ends(t, conns+len(others))
	requireCompleted(t, streams, conns+len(others))
	for _, k := range others {
		next := ID{Sock: k.id.Sock, Gen: k.id.Gen, Seq: k.id.Seq + 1}
		if _, ok := streams[next]; !ok {
			var got []ID
			for id := range streams {
				if id.Sock == k.id.Sock && id != k.id {
					got = append(got, id)
				}
			}
			t.Errorf("connection of stream %+v: next stream %+v, want %+v (the same connection's state)", k.id, got, next)
		}
	}
	if held, _ := slotOwners(t, tr.maps.TwStFront); len(held) != 0 {
		t.Errorf("%d live connections took front slots that freed: %v", len(held), held)
	}
	if tracked, err := tr.Sockets(); err != nil || tracked != len(others) {
		t.Errorf("%d connections open, %d tracked (%v)", len(others), tracked, err)
	}
	t.Logf("%d connections: %d in front slots closed, %d kept their state elsewhere", conns, conns-len(others), len(others))
}
