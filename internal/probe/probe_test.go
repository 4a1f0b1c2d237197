package probe

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/hook"
)

// streamMaps loads the stream collection's maps, for attaching its
// programs one at a time as the tracers do.
func streamMaps(t *testing.T) (*ebpf.CollectionSpec, map[string]*ebpf.Map) {
	t.Helper()
	spec, err := bpf.LoadStream()
	if err != nil {
		t.Fatal(err)
	}
	var maps bpf.StreamMaps
	if err := spec.LoadAndAssign(&maps, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { maps.Close() })
	return spec, map[string]*ebpf.Map{
		"tw_st_ports": maps.TwStPorts, "tw_st_socks": maps.TwStSocks, "tw_st_events": maps.TwStEvents,
		"tw_st_counters": maps.TwStCounters, "tw_st_calls": maps.TwStCalls,
	}
}

// TestFailedPartLeavesNothing: when the second program of a variant cannot
// attach, the first is detached and both are unloaded.
//
// Both parts are on sock:inet_sock_set_state, which every kernel of the
// matrix has (4.16+): a part on a newer tracepoint (sk_data_ready, 6.3+)
// would already fail to load on 5.10 and 6.1, and the test would then
// never reach the case it is about, an attached first part.
func TestFailedPartLeavesNothing(t *testing.T) {
	bpftest.Require(t)
	spec, maps := streamMaps(t)
	base, err := bpftest.NewBaseline()
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(*ebpf.Program) (link.Link, error) { return nil, errors.New("refused by the test") }
	_, err = LoadAndAttach(spec, maps, []Part{
		{Program: "tw_st_state_btf", Attach: Tracing()},
		{Program: "tw_st_state_raw", Attach: refuse},
	})
	if err == nil || !strings.Contains(err.Error(), "attach tw_st_state_raw: refused by the test") {
		t.Fatalf("error %v; want the second part's refusal, named", err)
	}
	if left, err := base.WaitGone(time.Second); err != nil || !left.Empty() {
		t.Fatalf("left behind: %v (%v)", left, err)
	}
}

// TestCheckRefusesBeforeLoading: a variant whose Check fails is refused
// with the check's words, and the next hook type is tried.
func TestCheckRefusesBeforeLoading(t *testing.T) {
	bpftest.Require(t)
	spec, maps := streamMaps(t)
	variants := append(Tracepoints("tw_st_ready", "sock", "no_such_tracepoint"),
		One(hook.Kprobe, "tw_st_state_btf", Tracing()))
	c, err := Choose(spec, maps, []hook.Kind{hook.TPBTF, hook.Kprobe}, variants)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Closer.Close()
	if c.Kind != hook.Kprobe || len(c.Refused) != 1 ||
		c.Refused[0].Err.Error() != "this kernel has no tracepoint sock:no_such_tracepoint" {
		t.Fatalf("choice %s; want tp_btf refused for the missing tracepoint, then the next type", c.Summary())
	}
}

// TestHaveAtomics: the probe answers as the kernel's version says, on the
// kernels of the matrix (BPF atomics came with Linux 5.12).
func TestHaveAtomics(t *testing.T) {
	bpftest.Require(t)
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	want := major > 5 || major == 5 && minor >= 12
	if got := HaveAtomics(); got != want {
		t.Fatalf("HaveAtomics() = %v on Linux %s, want %v", got, release, want)
	}
}
