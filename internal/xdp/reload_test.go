package xdp

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

func prefixes(ss ...string) []netip.Prefix {
	out, err := ParseCIDRs(ss)
	if err != nil {
		panic(err)
	}
	return out
}

// expect runs frame and fails unless the verdict is (action, reason).
func expect(tb testing.TB, inst *instance, what string, frame []byte, action Action, reason Reason) {
	tb.Helper()
	got, delta := runFrame(tb, inst, frame)
	if msg := verdictErr(frame, got, delta, action, reason); msg != "" {
		tb.Errorf("%s: %s", what, msg)
	}
}

func TestReloadReplacesTheBlocklist(t *testing.T) {
	f, inst := loadInstance(t, []string{"203.0.113.0/24", "2001:db8:bad::/48"})
	fromA := ether(etIPv4, nil, ipv4(netip.MustParseAddr("203.0.113.1"), dst4, 0, 10))
	fromB := ether(etIPv4, nil, ipv4(netip.MustParseAddr("198.51.100.1"), dst4, 0, 10))
	fromC := ether(etIPv6, nil, ipv6(netip.MustParseAddr("2001:db8:bad::1"), dst6, 10))
	fromD := ether(etIPv6, nil, ipv6(netip.MustParseAddr("2001:db8:d::1"), dst6, 10))

	expect(t, inst, "A before", fromA, ActionDrop, ReasonBlocklist)
	expect(t, inst, "B before", fromB, ActionPass, ReasonNone)
	expect(t, inst, "C before", fromC, ActionDrop, ReasonBlocklist)
	expect(t, inst, "D before", fromD, ActionPass, ReasonNone)

	if err := f.Reload(prefixes("198.51.100.0/24", "2001:db8:d::/48")); err != nil {
		t.Fatal(err)
	}
	expect(t, inst, "A after", fromA, ActionPass, ReasonNone)
	expect(t, inst, "B after", fromB, ActionDrop, ReasonBlocklist)
	expect(t, inst, "C after", fromC, ActionPass, ReasonNone)
	expect(t, inst, "D after", fromD, ActionDrop, ReasonBlocklist)
	if st := f.Stats(); st.Entries4 != 1 || st.Entries6 != 1 || st.Reloads != 1 || st.ReloadErrors != 0 {
		t.Errorf("Stats() = %+v", st)
	}

	// Only IPv6 changes: the IPv4 table in force is kept.
	old4 := f.block4.inner
	if err := f.Reload(prefixes("198.51.100.0/24", "2001:db8:bad::/48")); err != nil {
		t.Fatal(err)
	}
	if f.block4.inner != old4 {
		t.Error("the unchanged IPv4 table was rebuilt")
	}
	expect(t, inst, "B still", fromB, ActionDrop, ReasonBlocklist)
	expect(t, inst, "C again", fromC, ActionDrop, ReasonBlocklist)

	// Empty list: nothing blocked.
	if err := f.Reload(nil); err != nil {
		t.Fatal(err)
	}
	expect(t, inst, "B, empty list", fromB, ActionPass, ReasonNone)
	expect(t, inst, "C, empty list", fromC, ActionPass, ReasonNone)
}

func TestReloadOverCapacityKeepsTheOldList(t *testing.T) {
	bpftest.Require(t)
	f, err := newFilter(Config{Blocklist: []string{"203.0.113.0/24"}, Capacity4: 4, Capacity6: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inst, err := f.newInstance("test")
	if err != nil {
		t.Fatal(err)
	}
	fromA := ether(etIPv4, nil, ipv4(netip.MustParseAddr("203.0.113.1"), dst4, 0, 10))

	err = f.Reload(prefixes("192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"))
	if err == nil || !strings.Contains(err.Error(), "5 distinct IPv4 prefixes, more than the capacity of 4") || FailureOf(err) != FailureCapacity {
		t.Errorf("over capacity: %v", err)
	}
	err = f.Reload(prefixes("2001:db8::1", "2001:db8::2", "2001:db8::3"))
	if err == nil || !strings.Contains(err.Error(), "3 distinct IPv6 prefixes, more than the capacity of 2") || FailureOf(err) != FailureCapacity {
		t.Errorf("over capacity: %v", err)
	}
	expect(t, inst, "old list still in force", fromA, ActionDrop, ReasonBlocklist)
	if st := f.Stats(); st.ReloadErrors != 2 || st.ReloadErrorsByReason[FailureCapacity] != 2 || st.Reloads != 0 || st.Entries4 != 1 {
		t.Errorf("Stats() = %+v", st)
	}
	// Exactly at capacity fits: duplicates and host bits do not count twice.
	if err := f.Reload(prefixes("192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.4/32", "::ffff:192.0.2.1")); err != nil {
		t.Errorf("at capacity: %v", err)
	}

	if _, err := newFilter(Config{Blocklist: []string{"192.0.2.1", "192.0.2.2"}, Capacity4: 1}); err == nil {
		t.Error("a config blocklist over capacity loaded")
	}
}

// TestReloadHasNoWindow reloads back and forth between two lists that
// both block one address, through different prefixes, while frames from
// that address run through the program on other goroutines: not one may
// pass. And after each Reload returns, the address only the new list
// blocks is dropped.
func TestReloadHasNoWindow(t *testing.T) {
	f, inst := loadInstance(t, nil)
	always := ether(etIPv4, nil, ipv4(netip.MustParseAddr("203.0.113.77"), dst4, 0, 10))
	always6 := ether(etIPv6, nil, ipv6(netip.MustParseAddr("2001:db8:bad::77"), dst6, 10))
	listA := prefixes("203.0.113.77", "2001:db8:bad::/48", "198.51.100.0/25")
	listB := prefixes("203.0.113.0/24", "2001:db8:bad::77", "198.51.100.128/25")
	onlyA := ether(etIPv4, nil, ipv4(netip.MustParseAddr("198.51.100.1"), dst4, 0, 10))
	onlyB := ether(etIPv4, nil, ipv4(netip.MustParseAddr("198.51.100.200"), dst4, 0, 10))
	if err := f.Reload(listA); err != nil {
		t.Fatal(err)
	}

	var (
		stop   atomic.Bool
		passed atomic.Int64
		runs   atomic.Int64
		wg     sync.WaitGroup
	)
	for _, frame := range [][]byte{always, always6} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				// Repeat 1: see TestCountersAccumulate.
				ret, err := inst.prog.Run(&ebpf.RunOptions{Data: frame})
				if err != nil {
					t.Error(err)
					return
				}
				runs.Add(1)
				if Action(ret) != ActionDrop {
					passed.Add(1)
				}
			}
		}()
	}
	const reloads = 200
	for i := range reloads {
		list, newly, gone := listB, onlyB, onlyA
		if i%2 == 1 {
			list, newly, gone = listA, onlyA, onlyB
		}
		if err := f.Reload(list); err != nil {
			t.Fatal(err)
		}
		if ret, err := inst.prog.Run(&ebpf.RunOptions{Data: newly}); err != nil || Action(ret) != ActionDrop {
			t.Fatalf("reload %d: a newly blocked source got %s (%v) after Reload returned", i, Action(ret), err)
		}
		if ret, err := inst.prog.Run(&ebpf.RunOptions{Data: gone}); err != nil || Action(ret) != ActionPass {
			t.Fatalf("reload %d: an unblocked source got %s (%v) after Reload returned", i, Action(ret), err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := passed.Load(); n != 0 {
		t.Errorf("%d runs of an always-blocked source passed during reloads", n)
	}
	t.Logf("%d reloads while %d frames of always-blocked sources ran: none passed", reloads, runs.Load())
	// The counters saw every run of the concurrent goroutines.
	cs, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cs[1].Packets != uint64(runs.Load())+reloads || cs[0].Packets != reloads {
		t.Errorf("counters %+v after %d drops and %d passes", cs, runs.Load()+reloads, reloads)
	}
}

func TestReloadFile(t *testing.T) {
	bpftest.Require(t)
	path := filepath.Join(t.TempDir(), "blocklist.txt")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("203.0.113.0/24\n")
	f, err := newFilter(Config{Blocklist: []string{"2001:db8:bad::/48"}, BlocklistFile: path})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.loadFile(); err != nil {
		t.Fatal(err)
	}
	inst, err := f.newInstance("test")
	if err != nil {
		t.Fatal(err)
	}
	fromA := ether(etIPv4, nil, ipv4(netip.MustParseAddr("203.0.113.1"), dst4, 0, 10))
	fromB := ether(etIPv4, nil, ipv4(netip.MustParseAddr("198.51.100.1"), dst4, 0, 10))
	fromC := ether(etIPv6, nil, ipv6(netip.MustParseAddr("2001:db8:bad::1"), dst6, 10))
	expect(t, inst, "file entry", fromA, ActionDrop, ReasonBlocklist)
	expect(t, inst, "config entry", fromC, ActionDrop, ReasonBlocklist)

	write("198.51.100.0/24\n")
	if err := f.ReloadFile(); err != nil {
		t.Fatal(err)
	}
	expect(t, inst, "removed file entry", fromA, ActionPass, ReasonNone)
	expect(t, inst, "new file entry", fromB, ActionDrop, ReasonBlocklist)
	expect(t, inst, "config entry kept", fromC, ActionDrop, ReasonBlocklist)

	write("203.0.113.0/24\n# ok\nbogus\n")
	err = f.ReloadFile()
	if err == nil || !strings.Contains(err.Error(), path+":3: invalid address \"bogus\"") {
		t.Errorf("bad file: %v", err)
	}
	expect(t, inst, "old list kept after a bad file", fromB, ActionDrop, ReasonBlocklist)
	expect(t, inst, "bad file's good lines not applied", fromA, ActionPass, ReasonNone)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := f.ReloadFile(); err == nil {
		t.Error("missing file: no error")
	}
	expect(t, inst, "old list kept after the file went away", fromB, ActionDrop, ReasonBlocklist)
	if st := f.Stats(); st.Reloads != 1 || st.ReloadErrors != 2 {
		t.Errorf("Stats() = %+v, want 1 reload and 2 errors", st)
	}
}

func TestClosedFilter(t *testing.T) {
	f, _ := loadInstance(t, testBlocklist)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := f.Reload(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Reload after Close: %v", err)
	}
	if _, err := f.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters after Close: %v", err)
	}
	if _, err := f.newInstance("late"); !errors.Is(err, ErrClosed) {
		t.Errorf("newInstance after Close: %v", err)
	}
}

// TestNothingLeftLoaded: newFilter, instances and reloads leave no program
// or map behind once closed, including replaced tries.
func TestNothingLeftLoaded(t *testing.T) {
	bpftest.Require(t)
	base, err := bpftest.NewBaseline()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		f, err := newFilter(Config{Blocklist: testBlocklist})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := f.newInstance("test"); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			if err := f.Reload(prefixes("192.0.2.1", "2001:db8::"+string(rune('1'+i)))); err != nil {
				t.Fatal(err)
			}
		}
		ours, err := base.Ours()
		if err != nil {
			t.Fatal(err)
		}
		// 2 programs; maps: 4 outer, 4 tables in force, 2 counter arrays.
		if len(ours.Programs) != 2 {
			t.Errorf("while open: %v", ours)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if left, err := base.WaitGone(2 * time.Second); err != nil || !left.Empty() {
		t.Errorf("left behind: %v (%v)", left, err)
	}
}
