package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	pkg := Package{Dir: "internal/stream", Binary: "stream.test", Capability: "stream"}
	run := Run{ID: "kprobe/stream", Hook: "kprobe", Pkg: pkg, Timeout: 5 * time.Minute,
		Skips: []Skip{{Dir: pkg.Dir, Test: "TestX", Reason: "r"}}}
	out := func(rc int, ended bool, text string) *RunOutput {
		return &RunOutput{Begun: true, Ended: ended, RC: rc, Begin: time.Second, End: 3 * time.Second, Lines: strings.Split(text, "\n")}
	}
	pass := "=== RUN   TestA\n--- PASS: TestA (0.10s)\n=== RUN   TestB\n--- SKIP: TestB (0.00s)\nPASS"
	for _, tc := range []struct {
		name    string
		out     *RunOutput
		session string
		ok      bool
		problem string // substring
	}{
		{"pass", out(0, true, pass), "", true, ""},
		{"failed test", out(1, true, "=== RUN   TestA\n    a_test.go:1: boom\n--- FAIL: TestA (0.10s)\nFAIL"), "", false, "1 failed: TestA"},
		{"crash", out(2, true, "=== RUN   TestA\npanic: runtime error: index out of range\n\ngoroutine 7"), "", false, "crashed in TestA: panic: runtime error"},
		// A child process's crash that the test printed: the binary went on.
		{"child crashed", out(1, true, "=== RUN   TestA\nfatal error: all goroutines are asleep - deadlock!\n\ngoroutine 1 [select (no cases)]:\n    a_test.go:3: child died\n--- FAIL: TestA (0.10s)\n=== RUN   TestB\n--- PASS: TestB (0.10s)\nFAIL"), "", false, "1 failed: TestA"},
		{"go timeout", out(2, true, "=== RUN   TestA\npanic: test timed out after 5m0s"), "", false, "timed out after 5m0s (-test.timeout, per test) in TestA"},
		{"killed", out(137, true, "=== RUN   TestA"), "", false, "killed in TestA (exit 137)"},
		{"exit code only", out(1, true, pass), "", false, "exit 1 with no failed test"},
		{"no verdict", out(0, true, "=== RUN   TestA\n--- PASS: TestA (0.10s)"), "", false, "no PASS line"},
		{"no tests", out(0, true, "testing: warning: no tests to run\nPASS"), "", false, "no tests ran"},
		{"guest stopped", out(-1, false, "=== RUN   TestA"), "did not finish within 20m", false, "did not end: did not finish within 20m; running TestA"},
		{"never started", nil, "the guest never reached /init", false, "not run: the guest never reached /init"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Judge(run, tc.out, tc.session)
			if res.OK != tc.ok || !strings.Contains(res.Problem, tc.problem) || (tc.ok && res.Problem != "") {
				t.Errorf("ok %v problem %q, want ok %v problem containing %q", res.OK, res.Problem, tc.ok, tc.problem)
			}
			if len(res.Excluded) != 1 || res.Excluded[0] != "TestX" {
				t.Errorf("excluded %q", res.Excluded)
			}
		})
	}
	res := Judge(run, out(0, true, pass), "")
	if res.Passed != 1 || res.Skipped != 1 || res.Failed != 0 || res.Seconds != 2 || len(res.Skips) != 1 {
		t.Errorf("counts %d/%d/%d, %v s, skips %v", res.Passed, res.Failed, res.Skipped, res.Seconds, res.Skips)
	}
}

func TestBootAgain(t *testing.T) {
	lines := func(texts ...string) Exec {
		var e Exec
		for i, text := range texts {
			e.Lines = append(e.Lines, Line{At: time.Duration(i) * time.Second, Text: text})
		}
		return e
	}
	const oops = "[ 1271.266080] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI"
	const panicked = "[ 1271.275681] Kernel panic - not syncing: Fatal exception in interrupt"
	const df = "[  426.1] traps: PANIC: double fault, error_code: 0x0"
	for _, tc := range []struct {
		name  string
		e     Exec
		again bool
		why   string
		kept  []string
	}{
		{"panic before init", lines("Booting from ROM...", "[    6.918271] Kernel panic - not syncing: Fatal exception in interrupt"), true, "Kernel panic - not syncing: Fatal exception in interrupt", nil},
		// A panic once the plan runs may be the code under test's doing.
		{"panic after init", lines("@@twk boot", "@@twk begin default/stream", "[   40.1] Kernel panic - not syncing: Fatal exception"), false, "", nil},
		// An int3 in kernel text no patch site claims is TCG's: the runs
		// that ended stand, the one it cut short runs again.
		{"int3 after init", lines("@@twk boot", "@@twk begin default/xdp", "@@twk end default/xdp rc=0", "@@twk begin default/stream", "@@twk end default/stream rc=1",
			"@@twk begin default/handshake", oops, "RIP: 0010:__schedule+0x411/0xbe0", panicked),
			true, "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI; Kernel panic - not syncing: Fatal exception in interrupt", []string{"default/stream", "default/xdp"}},
		{"int3 without a panic", lines("@@twk boot", "@@twk begin default/xdp", oops), false, "", nil},
		{"int3 after the plan", lines("@@twk boot", "@@twk done", oops, panicked), false, "", nil},
		// A double fault whose saved flags have bits above 31 set is
		// TCG's too; one on a stack overflow, or with flags a CPU can
		// push, may be the code under test's.
		{"double fault with impossible flags", lines("@@twk boot", "@@twk begin default/xdp", "@@twk end default/xdp rc=0", "@@twk begin default/stream",
			df, "RSP: 0018:ffffc90000a4b818 EFLAGS: ff332a4200010046", "[  426.2] Kernel panic - not syncing: Machine halted."),
			true, "PANIC: double fault, error_code: 0x0 with EFLAGS ff332a4200010046; Kernel panic - not syncing: Machine halted.", []string{"default/xdp"}},
		{"double fault with reserved flags", lines("@@twk boot", "@@twk begin default/stream",
			df, "RSP: 0018:ffffc90000a4b818 EFLAGS: ff332a42", "[  426.2] Kernel panic - not syncing: Machine halted."),
			true, "PANIC: double fault, error_code: 0x0 with EFLAGS ff332a42; Kernel panic - not syncing: Machine halted.", []string{}},
		{"double fault on a stack overflow", lines("@@twk boot", "@@twk begin default/stream", "[  426.0] BUG: TASK stack guard page was hit at 0000 (stack is 0000..0000)",
			df, "RSP: 0018:ffffc90000a4b818 EFLAGS: ff332a4200010046", "[  426.2] Kernel panic - not syncing: Machine halted."), false, "", nil},
		{"double fault with flags a CPU can push", lines("@@twk boot", "@@twk begin default/stream",
			df, "RSP: 0018:ffffc90000a4b818 EFLAGS: 00010046", "[  426.2] Kernel panic - not syncing: Machine halted."), false, "", nil},
		{"hung before init", lines("Booting from ROM..."), false, "", nil},
		{"qemu did not start", Exec{}, false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why, kept, again := BootAgain(ParseSession(tc.e.Lines))
			if again != tc.again || why != tc.why || !slices.Equal(slices.Sorted(maps.Keys(kept)), tc.kept) {
				t.Errorf("BootAgain = %q, %v, %v; want %q, %v, %v", why, kept, again, tc.why, tc.kept, tc.again)
			}
		})
	}
}
