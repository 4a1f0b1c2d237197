package xdp

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// testBlocklist is the blocklist of the BPF_PROG_TEST_RUN tests: prefixes
// of several lengths, bare addresses and an IPv4-mapped entry.
var testBlocklist = []string{
	"203.0.113.0/24",
	"198.51.100.7",
	"192.0.2.128/25",
	"::ffff:198.51.100.9",
	"198.51.100.64/28",
	"2001:db8:bad::/48",
	"2001:db8::7",
	"2001:db8:c0b::/48",
}

// testAllowlist wins over testBlocklist: prefixes narrower than a blocked
// one (a hole in it), wider than one (which it cancels), and entries the
// blocklist does not touch (their traffic is plain "none").
var testAllowlist = []string{
	"203.0.113.200/29",
	"198.51.100.64/26",
	"2001:db8:bad:a11::/64",
	"2001:db8:c00::/40",
	"192.0.2.1",
	"2001:db8::1",
}

// testConfig is the configuration of the table and differential tests.
func testConfig() Config {
	return Config{Blocklist: testBlocklist, Allowlist: testAllowlist}
}

var (
	src4OK      = netip.MustParseAddr("192.0.2.1")
	src4Blocked = netip.MustParseAddr("203.0.113.9")
	dst4        = netip.MustParseAddr("192.0.2.2")
	src6OK      = netip.MustParseAddr("2001:db8::1")
	src6Blocked = netip.MustParseAddr("2001:db8:bad::9")
	dst6        = netip.MustParseAddr("2001:db8::2")
)

// maxTestFrame is the largest frame the tests hand to BPF_PROG_TEST_RUN:
// a full-size Ethernet frame with two tags (the kernel takes up to about
// a page minus headroom and tailroom).
const maxTestFrame = 1522

// loadInstance loads a filter with the blocklist and one program instance
// for BPF_PROG_TEST_RUN, held in the XDP dispatcher (see
// bpftest.HoldInXDPDispatcher) but attached to no device that carries
// traffic. Both are closed when tb ends.
func loadInstance(tb testing.TB, blocklist []string) (*Filter, *instance) {
	tb.Helper()
	return loadInstanceCfg(tb, Config{Blocklist: blocklist})
}

// loadInstanceCfg is loadInstance with a whole configuration.
func loadInstanceCfg(tb testing.TB, cfg Config) (*Filter, *instance) {
	tb.Helper()
	f, inst := loadUnheld(tb, cfg)
	bpftest.HoldInXDPDispatcher(tb, inst.prog)
	return f, inst
}

// loadUnheld is loadInstanceCfg without the hold, for benchmarks: a
// BPF_PROG_TEST_RUN with repeat > 1 puts its program in the dispatcher
// for the run anyway, and a held program would be one more entry there
// for every other program the benchmark compares it with.
func loadUnheld(tb testing.TB, cfg Config) (*Filter, *instance) {
	tb.Helper()
	bpftest.Require(tb)
	f, err := newFilter(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := f.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	inst, err := f.newInstance("test")
	if err != nil {
		tb.Fatal(err)
	}
	return f, inst
}

type slots = [bpf.XDPCounterSlots]bpf.XDPCounterValue

// runFrame runs one frame through the program and returns its action and
// the change of every counter slot.
func runFrame(tb testing.TB, inst *instance, frame []byte) (Action, slots) {
	tb.Helper()
	before, err := inst.read()
	if err != nil {
		tb.Fatal(err)
	}
	ret, err := inst.prog.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		tb.Fatalf("BPF_PROG_TEST_RUN with a %d-byte frame: %v", len(frame), err)
	}
	after, err := inst.read()
	if err != nil {
		tb.Fatal(err)
	}
	var delta slots
	for i := range delta {
		delta[i].Packets = after[i].Packets - before[i].Packets
		delta[i].Bytes = after[i].Bytes - before[i].Bytes
	}
	return Action(ret), delta
}

// verdictErr describes how the kernel's answer differs from (action,
// reason) with exactly one packet of len(frame) bytes counted in its slot
// and nothing anywhere else; "" when it does not.
func verdictErr(frame []byte, got Action, delta slots, action Action, reason Reason) string {
	var want slots
	want[counterSlot(action, reason)] = bpf.XDPCounterValue{Packets: 1, Bytes: uint64(len(frame))}
	if got == action && delta == want {
		return ""
	}
	return fmt.Sprintf("kernel: %s, counter deltas %s; want %s/%s, deltas %s",
		got, fmtSlots(delta), action, reason, fmtSlots(want))
}

func fmtSlots(s slots) string {
	out := "{"
	for i, v := range s {
		if v.Packets != 0 || v.Bytes != 0 {
			a, r := Action(uint32(i)/bpf.XDPReasonMax), Reason(uint32(i)%bpf.XDPReasonMax)
			out += fmt.Sprintf(" %s/%s: %d pkts %d B", a, r, v.Packets, v.Bytes)
		}
	}
	return out + " }"
}

// TestFrames runs every case through the kernel program and checks the
// action, the exact counter deltas, and that the reference agrees.
func TestFrames(t *testing.T) {
	f, inst := loadInstanceCfg(t, testConfig())
	ref := referenceLists(t, f)
	for _, tc := range frameCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, delta := runFrame(t, inst, tc.frame)
			if msg := verdictErr(tc.frame, got, delta, tc.action, tc.reason); msg != "" {
				t.Errorf("%d-byte frame % x\n%s", len(tc.frame), tc.frame, msg)
			}
			if a, r := referenceClassify(tc.frame, ref); a != tc.action || r != tc.reason {
				t.Errorf("reference: %s/%s, want %s/%s", a, r, tc.action, tc.reason)
			}
		})
	}
}

// referenceLists is the reference classifier's view of f's lists: the
// blocklist in force and the configured allowlist, parsed again.
func referenceLists(tb testing.TB, f *Filter) refLists {
	tb.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	lists := refLists{block: append(append(prefixSet{}, f.cur4...), f.cur6...)}
	for _, s := range f.cfg.Allowlist {
		p, err := ParsePrefix(s)
		if err != nil {
			tb.Fatal(err)
		}
		lists.allow = append(lists.allow, p)
	}
	return lists
}

// TestEmptyBlocklist: with nothing blocked, the blocklist lookups run and
// miss; malformed frames are still dropped.
func TestEmptyBlocklist(t *testing.T) {
	_, inst := loadInstance(t, nil)
	for _, tc := range []frameCase{
		pass("ipv4", ether(etIPv4, nil, ipv4(src4Blocked, dst4, 0, 10))),
		pass("ipv6", ether(etIPv6, nil, ipv6(src6Blocked, dst6, 10))),
		malformed("ipv4 IHL 4", ether(etIPv4, nil, edit(ipv4(src4OK, dst4, 0, 10), 0, setIHL(4)))),
	} {
		got, delta := runFrame(t, inst, tc.frame)
		if msg := verdictErr(tc.frame, got, delta, tc.action, tc.reason); msg != "" {
			t.Errorf("%s: %s", tc.name, msg)
		}
	}
}

// TestCountersAccumulate: counts add up over many runs, per verdict, and
// Counters reports them per interface.
func TestCountersAccumulate(t *testing.T) {
	f, inst := loadInstanceCfg(t, testConfig())
	okFrame := ether(etIPv4, nil, ipv4(src4OK, dst4, 0, 100))
	badFrame := ether(etIPv6, nil, ipv6(src6Blocked, dst6, 7))
	malFrame := ether(etIPv4, nil, edit(ipv4(src4OK, dst4, 0, 3), 0, setIHL(2)))
	allowFrame := ether(etIPv6, nil, ipv6(netip.MustParseAddr("2001:db8:bad:a11::1"), dst6, 3))
	const n = 100
	for range n {
		// One run per syscall: with Repeat > 1 a signal can interrupt the
		// kernel's loop, and cilium/ebpf then starts it over, so the
		// program may run more often than asked.
		for _, fr := range [][]byte{okFrame, okFrame, okFrame, badFrame, malFrame, allowFrame, allowFrame} {
			if _, err := inst.prog.Run(&ebpf.RunOptions{Data: fr}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := f.Counters()
	if err != nil {
		t.Fatal(err)
	}
	want := []Counter{
		{"test", ActionPass, ReasonNone, 3 * n, 3 * n * uint64(len(okFrame))},
		{"test", ActionDrop, ReasonBlocklist, n, n * uint64(len(badFrame))},
		{"test", ActionDrop, ReasonMalformed, n, n * uint64(len(malFrame))},
		{"test", ActionPass, ReasonAllowlist, 2 * n, 2 * n * uint64(len(allowFrame))},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Counters() = %+v\nwant %+v", got, want)
	}
}
