package main

import (
	"cmp"
	"path"
	"slices"
	"time"

	"github.com/tokenwire/tokenwire/internal/hook"
)

// The test plan: which binaries run, under which hook order, with which
// tests excluded. The same plan runs in every guest and natively.

// Environment the plan sets for every test binary. They equal
// bpftest.RequireEnv, teststack.RequireStacksEnv and bpftest.HookOrderEnv
// (checked by a test; this program does not import the test helpers).
const (
	requireEnv       = "TOKENWIRE_REQUIRE_BPF"
	requireStacksEnv = "TOKENWIRE_REQUIRE_STACKS"
	hookOrderEnv     = "TOKENWIRE_HOOK_ORDER"
)

// defaultHook names the run with the default hook order (no
// TOKENWIRE_HOOK_ORDER).
const defaultHook = "default"

// Hooks lists the matrix's hook columns: the default order, then each hook
// type forced first, in hook.DefaultOrder.
func Hooks() []string {
	out := []string{defaultHook}
	for _, k := range hook.DefaultOrder {
		out = append(out, string(k))
	}
	return out
}

// hookRuns names the capabilities that run once per forced hook type: the
// two probes that have a program per hook type. XDP has one hook type;
// the receiver has no hook logic of its own (it hands hook_preference to
// these two probes), so its forced runs would repeat theirs through a
// collector, at the cost of a stream and a handshake probe load per test.
var hookRuns = []string{"stream", "handshake"}

// Skip is a test left out of some runs, with the reason.
type Skip struct {
	Dir    string `json:"package"` // package directory, e.g. internal/xdp
	Test   string `json:"test"`    // top-level test name
	Reason string `json:"reason"`
}

// Reasons for guestSkips.
const (
	needVeth    = "needs bpftest.VethPair: `ip netns add` and a veth pair (iproute2), which busybox's ip cannot make"
	needNetnsEx = "needs `ip netns exec` (iproute2) to start its child in a namespace, and a veth pair"
	needSetpriv = "needs `setpriv` (util-linux) to start its child as an unprivileged user; busybox has none"
	needGo      = "needs the Go toolchain to build the two programs it reads; it reads ELF files only, which no kernel changes"
)

// guestSkips are the tests that cannot run in a guest: busybox has no
// iproute2 (network namespaces, veth) and no setpriv, and the guests
// carry the host's server stacks (Stacks) but no Go toolchain. The guests' plan
// leaves them out; the native row runs them. A unit test checks this list
// against the test sources, both ways: every entry names a test that
// exists, and every test that calls bpftest.VethPair or exec.Command
// (directly or through a helper of its package) is listed.
var guestSkips = []Skip{
	{"internal/handshake", "TestHandshakeAcrossNamespaces", needVeth},
	{"internal/xdp", "TestFailOpenWhenTheOwnerDies", needNetnsEx},
	{"internal/xdp", "TestVethDropsBlocklistedSources", needVeth},
	{"internal/xdp", "TestVethFileEditWhileTrafficFlows", needVeth},
	{"internal/xdp", "TestForeignProgramIsRefused", needVeth},
	{"internal/xdp", "TestOpenCloseLeavesNothing", needVeth},
	{"internal/xdp", "TestInterfaceDisappears", needVeth},
	{"internal/tlsprobe", "TestGoPlanWithAndWithoutSymbols", needGo},
	{"receiver/tokenwirereceiver", "TestStartWithoutPrivileges", needSetpriv},
	{"receiver/tokenwirereceiver", "TestXDPFilterInThePipeline", needVeth},
	{"receiver/tokenwirereceiver", "TestStreamProbeDownOthersRun", needVeth},
	{"receiver/tokenwirereceiver", "TestXDPDownOthersRun", needVeth},
	{"receiver/tokenwirereceiver", "TestXDPRequiredByDefault", needVeth},
	{"receiver/tokenwirereceiver", "TestNoCapabilityStarts", needVeth},
	{"receiver/tokenwirereceiver", "TestXDPAllowlistAndRefusedReload", needVeth},
}

// hookRunSkips are left out of the forced-hook runs; the default run
// still runs them on every kernel. The handshake package's forced runs
// take all its other tests: they cost about 10 s a run, and a new test is
// run per hook type unless it is listed here.
var hookRunSkips = []Skip{
	{"internal/handshake", "TestEveryHookTypeOrAClearRefusal", ownOrder},
}

// Only limits a package's forced-hook runs to the listed tests; the rest
// run in its default run, on every kernel.
type Only struct {
	Dir    string   `json:"package"`
	Tests  []string `json:"tests"`
	Reason string   `json:"reason"`
}

// hookRunOnly: forced runs of these packages take a fixed core, so that
// the matrix does not grow with every test the suites gain (a stream
// probe load takes 8-9 s under emulation with one guest, 20-35 s with
// three at once; the stream tests that only read records share a load
// per run and write-tail source, the others load their own; for each of
// 3 kernels and 4 forced types).
var hookRunOnly = []Only{
	{Dir: "internal/stream", Tests: []string{
		"TestHooksInUse",                      // what attached at each point (HOOKS lines)
		"TestSSEStreamIsMeasuredExactly",      // every stamp and byte, from the ready, send and state hooks
		"TestPeekedRequestIsCapturedOnce",     // the receive hooks
		"TestClientAbortEndsThePartialStream", // the state hook ending a stream mid-response
		"TestEarlyCloseMakesNoGhostStream",    // the send hook's report against the client's FIN
		"TestFinBeforeTheReportOfTheResponse", // a FIN before the report of the response's only write
		"TestClosedClientsAnswer",             // a closed client's reset against the send hook's report
		"TestNodeQueueEndsAtItsTerminator",    // a write of 13 buffers: its end from the kernel's copy or the iterator, or missed
	}, Reason: "the tests of what differs between hook types: the ready, receive, send and state hooks, the order of " +
		"the send hook's report against the state hook, and how a write of more than eight buffers is read (the " +
		"kernel's copy at fexit and tp_btf on 6.2+, else its iterator at the fexit and the kretprobe; missed at " +
		"raw_tracepoint, tracepoint and tp_btf reading the writer's memory). The syscall variants, partial writes and " +
		"HTTP framing (interim heads, pipelining, close-delimited bodies, gathered terminators of up to eight buffers, port " +
		"lists...) read the same syscall buffers through the same BPF code whichever hook fed it, and run in the default " +
		"run on every kernel; TestEveryHookType tries every type alone itself, with the state in socket storage and in the map"},
}

// guestOnly limits a package's runs in the guests to the listed tests; the
// native row runs them all.
var guestOnly = []Only{
	{Dir: receiverDir, Tests: []string{
		"TestStreamMetricsAndSpans",           // the stream probe through the collector's pipelines
		"TestHandshakeMetricsAreExact",        // the handshake probe through them
		"TestShutdownReportsEveryEndedStream", // the last records a probe delivers at shutdown
		"TestRequiredStreamProbe",             // the stream probe failing on a kernel: Start's error
		"TestGenAIFormatsThroughTheKernel",    // every wire format, vLLM's on FastAPI, through the probes and the receiver
		"TestGenAILastEventWithTheEnd",        // Node's gathered write of the last event and the terminator
	}, Reason: "each receiver test starts a whole collector pipeline with every probe, 10-15 s a test under emulation " +
		"with three guests at once; the receiver's own logic (pipelines, flushes, idle timeouts, self-telemetry, config, " +
		"translation) is the same on every kernel and runs natively. " +
		"TestFailedStartLeavesNothing needs kprobes refused, and every guest kernel accepts them"},
}

const ownOrder = "tries each hook type alone itself (cfg.HookOrder), so TOKENWIRE_HOOK_ORDER changes nothing: the default run covers every type"

// Run is one execution of one test binary.
type Run struct {
	ID      string // <hook>/<capability>, unique in a plan
	Hook    string // defaultHook or a hook type forced first
	Pkg     Package
	Skips   []Skip // left out: guestSkips, then hookRunSkips
	Timeout time.Duration
	// Only lists the tests the run is limited to, if any.
	Only []string
	// SameAs names the run whose hook order this one would repeat
	// exactly; such a run is not executed, its cells show that run's.
	SameAs string
}

// BuildPlan lists the runs: every package once with the default hook
// order, then the hook-sensitive ones once per forced hook type. guest
// applies guestSkips.
//
// Forcing the first type of the default order (fentry) gives the default
// order itself (bpftest.HookOrder: the forced type, then the rest of the
// default order), so that run would repeat the default run test for
// test; it is marked SameAs instead of run twice.
func BuildPlan(pkgs []Package, guest bool, timeout time.Duration) []Run {
	var runs []Run
	for _, p := range pkgs {
		r := Run{ID: defaultHook + "/" + p.Capability, Hook: defaultHook, Pkg: p, Timeout: timeout}
		if guest {
			r.Skips = skipsFor(guestSkips, p)
			for _, o := range guestOnly {
				if o.Dir == p.Dir {
					r.Only = o.Tests
				}
			}
		}
		runs = append(runs, r)
	}
	for _, h := range Hooks()[1:] {
		for _, p := range pkgs {
			if !slices.Contains(hookRuns, p.Capability) {
				continue
			}
			r := Run{ID: h + "/" + p.Capability, Hook: h, Pkg: p, Timeout: timeout}
			if guest {
				r.Skips = skipsFor(guestSkips, p)
			}
			r.Skips = append(r.Skips, skipsFor(hookRunSkips, p)...)
			for _, o := range hookRunOnly {
				if o.Dir == p.Dir {
					r.Only = o.Tests
				}
			}
			if h == string(hook.DefaultOrder[0]) {
				r.SameAs = defaultHook + "/" + p.Capability
			}
			runs = append(runs, r)
		}
	}
	if guest {
		// The receiver's runs go last in the guests: they cost the most
		// per test (a collector pipeline and every probe), and a guest
		// that runs out of time then loses those, not the probes' own.
		slices.SortStableFunc(runs, func(a, b Run) int {
			return cmp.Compare(boolInt(a.Pkg.Dir == receiverDir), boolInt(b.Pkg.Dir == receiverDir))
		})
	}
	return runs
}

const receiverDir = "receiver/tokenwirereceiver"

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func skipsFor(list []Skip, p Package) []Skip {
	var out []Skip
	for _, s := range list {
		if s.Dir == p.Dir {
			out = append(out, s)
		}
	}
	return out
}

// OnlyOf returns the entries of list (hookRunOnly, guestOnly) for the
// given packages.
func OnlyOf(list []Only, pkgs []Package) []Only {
	var out []Only
	for _, o := range list {
		if slices.ContainsFunc(pkgs, func(p Package) bool { return p.Dir == o.Dir }) {
			out = append(out, o)
		}
	}
	return out
}

// SkipsOf returns the entries of list (guestSkips, hookRunSkips) for
// the given packages.
func SkipsOf(list []Skip, pkgs []Package) []Skip {
	var out []Skip
	for _, p := range pkgs {
		out = append(out, skipsFor(list, p)...)
	}
	return out
}

// SelectRuns keeps the runs whose id matches one of globs (all when globs
// is empty), for working on one cell without the whole matrix. A kept run
// that would stand in for a dropped one (SameAs) runs itself. tests, if
// any, replace the kept runs' lists of tests.
func SelectRuns(plan []Run, globs, tests []string) []Run {
	if len(globs) == 0 && len(tests) == 0 {
		return plan
	}
	var out []Run
	for _, r := range plan {
		if len(globs) > 0 && !slices.ContainsFunc(globs, func(g string) bool { ok, _ := path.Match(g, r.ID); return ok }) {
			continue
		}
		if len(tests) > 0 {
			r.Only = tests
		}
		out = append(out, r)
	}
	for i, r := range out {
		if r.SameAs != "" && !slices.ContainsFunc(out, func(o Run) bool { return o.ID == r.SameAs }) {
			out[i].SameAs = ""
		}
	}
	return out
}
