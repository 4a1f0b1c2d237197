package main

import (
	"fmt"
	"slices"
	"strings"
)

// RunResult is one cell's worth of results: one test binary under one
// hook order on one kernel.
type RunResult struct {
	ID         string `json:"id"`
	Hook       string `json:"hook"`
	Capability string `json:"capability"`
	Package    string `json:"package"`
	// SameAs: this run was not executed, its hook order being that of
	// the named run; the results are that run's.
	SameAs     string       `json:"same_as,omitempty"`
	OK         bool         `json:"ok"`
	Problem    string       `json:"problem,omitempty"` // why not OK, in one line
	Short      string       `json:"short,omitempty"`   // the problem in a word or two, for the matrix cell
	Passed     int          `json:"passed"`
	Failed     int          `json:"failed"`
	Skipped    int          `json:"skipped"`
	Excluded   []string     `json:"excluded,omitempty"` // top-level tests left out
	Only       []string     `json:"only,omitempty"`     // the tests the run was limited to
	Seconds    float64      `json:"seconds"`
	ExitCode   int          `json:"exit_code"`
	Failures   []TestCase   `json:"failures,omitempty"`
	Skips      []TestCase   `json:"skips,omitempty"`
	Panic      []string     `json:"panic,omitempty"`
	Unfinished []string     `json:"unfinished,omitempty"`
	Tests      []TestCase   `json:"tests"`
	HookMatrix []HookMatrix `json:"-"` // gathered per kernel
	Hooks      []HookChoice `json:"hooks,omitempty"`
	Malformed  []string     `json:"malformed_hook_lines,omitempty"`
}

// Judge turns a run's output into its result. A run is OK only if the
// binary exited 0 after printing PASS, no test failed and at least one
// test ran; anything else (a crash, a hang, a guest that stopped before
// the run ended, a run that never started) is a failure with a reason.
func Judge(r Run, out *RunOutput, sessionProblem string) RunResult {
	res := RunResult{ID: r.ID, Hook: r.Hook, Capability: r.Pkg.Capability, Package: r.Pkg.Dir, ExitCode: -1}
	for _, s := range r.Skips {
		res.Excluded = append(res.Excluded, s.Test)
	}
	res.Only = r.Only
	if out == nil || !out.Begun {
		res.Problem, res.Short = "not run", "not run"
		if sessionProblem != "" {
			res.Problem += ": " + sessionProblem
		}
		return res
	}
	g := ParseGoTest(out.Lines)
	res.Tests, res.Panic, res.Unfinished = g.Tests, g.Panic, g.Unfinished
	res.HookMatrix, res.Hooks, res.Malformed = g.HookMatrix, g.Hooks, g.Malformed
	res.Passed, res.Failed, res.Skipped = g.Counts()
	res.Failures = g.Failed()
	for _, tc := range g.Tests {
		if tc.Status == statusSkip {
			res.Skips = append(res.Skips, tc)
		}
	}
	res.Seconds = out.Duration().Seconds()
	res.ExitCode = out.RC
	switch {
	case !out.Ended:
		res.Problem, res.Short = "did not end", "did not end"
		if sessionProblem != "" {
			res.Problem += ": " + sessionProblem
		}
		if len(g.Unfinished) > 0 {
			res.Problem += "; running " + g.Unfinished[len(g.Unfinished)-1]
		}
	case g.TimedOut:
		res.Short = "timed out"
		res.Problem = fmt.Sprintf("timed out after %s (-test.timeout, per test)", r.Timeout)
		if len(g.Unfinished) > 0 {
			res.Problem += " in " + strings.Join(g.Unfinished, ", ")
		}
	case len(g.Unfinished) > 0 && len(g.Panic) > 0:
		// Each test runs in an invocation of its own: a later one's PASS
		// does not make up for one that crashed.
		res.Problem, res.Short = fmt.Sprintf("crashed in %s: %s", strings.Join(g.Unfinished, ", "), g.Panic[0]), "crashed"
	case len(g.Unfinished) > 0:
		res.Problem, res.Short = fmt.Sprintf("killed in %s (exit %d)", strings.Join(g.Unfinished, ", "), out.RC), "killed"
	case (out.RC == 124 || out.RC == 137) && g.Final == "":
		res.Problem, res.Short = fmt.Sprintf("killed (exit %d) by the per-test timeout", out.RC), "killed"
	case len(g.Panic) > 0 && g.Final == "":
		res.Problem, res.Short = "crashed: "+g.Panic[0], "crashed"
	case res.Failed > 0 || slices.ContainsFunc(g.Tests, func(t TestCase) bool { return t.Status == statusFail }):
		names := make([]string, len(res.Failures))
		for i, f := range res.Failures {
			names[i] = f.Name
		}
		res.Problem, res.Short = fmt.Sprintf("%d failed: %s", len(names), strings.Join(names, ", ")), "failed"
	case out.RC != 0:
		res.Problem, res.Short = fmt.Sprintf("exit %d with no failed test", out.RC), fmt.Sprintf("exit %d", out.RC)
		if len(g.Panic) > 0 {
			res.Problem += ": " + g.Panic[0]
		}
	case g.Final != "PASS":
		res.Problem, res.Short = "no PASS line", "no verdict"
	case len(g.Tests) == 0:
		res.Problem, res.Short = "no tests ran", "no tests"
	}
	res.OK = res.Problem == ""
	return res
}
