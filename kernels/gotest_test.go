package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// sampleOutput is -test.v output as a test binary prints it, with the
// HOOKMATRIX and HOOKS lines the hook tests log through t.Logf.
const sampleOutput = `=== RUN   TestPasses
    edge_test.go:372: sock_send_length: tp_btf
    edge_test.go:380: HOOKS capability=stream point=sock_send_length kind=tp_btf
--- PASS: TestPasses (1.92s)
=== RUN   TestHookTable
=== RUN   TestHookTable/fentry
    matrix_test.go:40: HOOKMATRIX capability=stream point=tcp_sendmsg kind=fentry result=attached reason=
    matrix_test.go:40: HOOKMATRIX capability=stream point=sock_send_length kind=kprobe result=none reason=no kprobe variant for this point
    matrix_test.go:40: HOOKMATRIX capability=handshake point=inet_sock_set_state kind=raw_tracepoint result=refused reason=load: permission denied: 478: (85) call bpf_probe_read_user#112: R2 min value is negative, either use unsigned or 'var &= const' (x=1)
--- PASS: TestHookTable/fentry (0.50s)
--- PASS: TestHookTable (0.51s)
=== RUN   TestFails
=== RUN   TestFails/raw_tracepoint
    edge_test.go:372: tcp_sendmsg_locked:  (refused: raw_tracepoint: load: ...)
    edge_test.go:402: http mode false, 7 chunks, end close; want http true, 5, terminator
=== RUN   TestFails/tp_btf
    --- FAIL: TestFails/raw_tracepoint (1.32s)
    --- PASS: TestFails/tp_btf (2.15s)
--- FAIL: TestFails (3.47s)
=== RUN   TestSkips
    x_test.go:9: not on this kernel
--- SKIP: TestSkips (0.00s)
=== RUN   TestMalformed
    x_test.go:12: HOOKMATRIX capability=stream kind=fentry result=attached
    x_test.go:13: HOOKMATRIX capability=stream point=p kind=fentry result=maybe reason=x
    x_test.go:14: not a HOOKS line: NOHOOKS capability=x
--- PASS: TestMalformed (0.00s)
FAIL
`

func TestParseGoTest(t *testing.T) {
	g := ParseGoTest(strings.Split(sampleOutput, "\n"))
	if g.Final != "FAIL" || len(g.Panic) != 0 || g.TimedOut || len(g.Unfinished) != 0 {
		t.Fatalf("final %q panic %q timedout %v unfinished %v", g.Final, g.Panic, g.TimedOut, g.Unfinished)
	}
	pass, fail, skip := g.Counts()
	if pass != 3 || fail != 1 || skip != 1 {
		t.Errorf("counts %d/%d/%d, want 3/1/1 (top-level tests only)", pass, fail, skip)
	}
	failed := g.Failed()
	if len(failed) != 1 || failed[0].Name != "TestFails/raw_tracepoint" {
		t.Fatalf("failed leaves %+v, want TestFails/raw_tracepoint", failed)
	}
	wantOut := []string{
		"edge_test.go:372: tcp_sendmsg_locked:  (refused: raw_tracepoint: load: ...)",
		"edge_test.go:402: http mode false, 7 chunks, end close; want http true, 5, terminator",
	}
	if diff := cmp.Diff(wantOut, failed[0].Output); diff != "" {
		t.Errorf("failed test's output (-want +got):\n%s", diff)
	}
	for _, tc := range g.Tests {
		if tc.Name == "TestSkips" && (len(tc.Output) != 1 || tc.Output[0] != "x_test.go:9: not on this kernel") {
			t.Errorf("skip reason %q", tc.Output)
		}
		if tc.Status == statusPass && tc.Output != nil {
			t.Errorf("%s passed but kept its output", tc.Name)
		}
	}
	wantHM := []HookMatrix{
		{Capability: "stream", Point: "tcp_sendmsg", Kind: "fentry", Result: "attached"},
		{Capability: "stream", Point: "sock_send_length", Kind: "kprobe", Result: "none", Reason: "no kprobe variant for this point"},
		{Capability: "handshake", Point: "inet_sock_set_state", Kind: "raw_tracepoint", Result: "refused",
			Reason: "load: permission denied: 478: (85) call bpf_probe_read_user#112: R2 min value is negative, either use unsigned or 'var &= const' (x=1)"},
	}
	if diff := cmp.Diff(wantHM, g.HookMatrix); diff != "" {
		t.Errorf("HOOKMATRIX (-want +got):\n%s", diff)
	}
	wantHooks := []HookChoice{{Capability: "stream", Point: "sock_send_length", Kind: "tp_btf"}}
	if diff := cmp.Diff(wantHooks, g.Hooks); diff != "" {
		t.Errorf("HOOKS (-want +got):\n%s", diff)
	}
	if len(g.Malformed) != 2 {
		t.Errorf("malformed %q, want the line without point and the one with result=maybe", g.Malformed)
	}
}

func TestParseGoTestTimeoutAndCrash(t *testing.T) {
	timeout := `=== RUN   TestQuick
--- PASS: TestQuick (0.01s)
=== RUN   TestHangs
=== RUN   TestHangs/sub
panic: test timed out after 5m0s
	running tests:
		TestHangs/sub (5m0s)

goroutine 1 [running]:`
	g := ParseGoTest(strings.Split(timeout, "\n"))
	if !g.TimedOut || g.Final != "" || len(g.Panic) < 3 {
		t.Fatalf("timed out %v, final %q, panic %q", g.TimedOut, g.Final, g.Panic)
	}
	if diff := cmp.Diff([]string{"TestHangs", "TestHangs/sub"}, g.Unfinished); diff != "" {
		t.Errorf("unfinished (-want +got):\n%s", diff)
	}

	crash := "=== RUN   TestA\nfatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [select (no cases)]:"
	g = ParseGoTest(strings.Split(crash, "\n"))
	if g.TimedOut || len(g.Panic) == 0 || g.Panic[0] != "fatal error: all goroutines are asleep - deadlock!" {
		t.Errorf("crash: timed out %v, panic %q", g.TimedOut, g.Panic)
	}
	if diff := cmp.Diff([]string{"TestA"}, g.Unfinished); diff != "" {
		t.Errorf("unfinished (-want +got):\n%s", diff)
	}
}

func TestParseGoTestKeepsHeadAndTailOfLongOutput(t *testing.T) {
	lines := []string{"=== RUN   TestLong"}
	for i := range 30 {
		lines = append(lines, "    x_test.go:1: line "+string(rune('a'+i%26)))
	}
	lines = append(lines, "    x_test.go:2: the fatal message", "--- FAIL: TestLong (1.00s)", "FAIL")
	out := ParseGoTest(lines).Tests[0].Output
	if len(out) != outputHead+outputTail+1 || out[len(out)-1] != "x_test.go:2: the fatal message" || !strings.Contains(out[outputHead], "left out") {
		t.Errorf("output %q", out)
	}
}

func TestHookFields(t *testing.T) {
	got := hookFields("capability=stream  point=p kind=k stray result=refused reason= a = b  c ")
	want := map[string]string{"capability": "stream", "point": "p", "kind": "k", "result": "refused", "reason": "a = b  c"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, _, ok := parseHookLine("    x_test.go:1: THEHOOKS capability=a point=b kind=c"); ok {
		t.Error("a keyword inside a word was read as HOOKS")
	}
	if _, hc, ok := parseHookLine("HOOKS capability=a point=b kind=c"); !ok || hc == nil || hc.Kind != "c" {
		t.Errorf("HOOKS at the start of a line: %v %+v", ok, hc)
	}
}
