package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// TestCase is one test's result line from `-test.v` output.
type TestCase struct {
	Name    string  `json:"name"` // TestX or TestX/sub
	Status  string  `json:"status"`
	Seconds float64 `json:"seconds"`
	// Output holds the first lines the test logged, for failed and
	// skipped tests only.
	Output []string `json:"output,omitempty"`
}

// Test statuses.
const (
	statusPass = "pass"
	statusFail = "fail"
	statusSkip = "skip"
)

// GoTest is what one test binary's `-test.v` output says.
type GoTest struct {
	Tests []TestCase
	// Final is the binary's last verdict line, PASS or FAIL ("ok" from
	// go test counts as PASS); "" when it never got there.
	Final string
	// Panic holds the first lines from the first "panic:" or "fatal
	// error:" on. Reading goes on after it: the panic may be a child
	// process's that the test printed, and the binary carried on.
	Panic []string
	// TimedOut: Go's -test.timeout fired.
	TimedOut bool
	// Unfinished lists tests that started and printed no result: where
	// the binary was when it crashed or hung.
	Unfinished []string
	HookMatrix []HookMatrix
	Hooks      []HookChoice
	// Malformed holds HOOKMATRIX/HOOKS lines that could not be read.
	Malformed []string
}

const (
	outputHead    = 4  // lines kept from the start of a failed or skipped test's output
	outputTail    = 16 // and from its end, where t.Fatal's message is
	maxPanicLines = 16
)

var (
	resultRE = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	eventRE  = regexp.MustCompile(`^=== (RUN|CONT|NAME|PAUSE)\s+(\S+)`)
)

// ParseGoTest reads the output of a test binary run with -test.v.
func ParseGoTest(lines []string) GoTest {
	var g GoTest
	output := map[string][]string{}
	started := map[string]bool{}
	var startOrder []string
	current := ""
	inPanic := false
	for _, raw := range lines {
		line := strings.TrimRight(raw, "\r")
		if inPanic && len(g.Panic) < maxPanicLines {
			g.Panic = append(g.Panic, line)
		}
		if m := eventRE.FindStringSubmatch(line); m != nil {
			current = m[2]
			if m[1] == "RUN" && !started[current] {
				started[current] = true
				startOrder = append(startOrder, current)
			}
			continue
		}
		if m := resultRE.FindStringSubmatch(line); m != nil {
			secs, _ := strconv.ParseFloat(m[3], 64)
			g.Tests = append(g.Tests, TestCase{Name: m[2], Status: strings.ToLower(m[1]), Seconds: secs})
			delete(started, m[2])
			continue
		}
		switch trimmed := strings.TrimSpace(line); {
		case trimmed == "PASS" || trimmed == "FAIL":
			g.Final = trimmed
			continue
		case strings.HasPrefix(trimmed, "ok ") || strings.HasPrefix(trimmed, "ok\t"):
			g.Final = "PASS"
			continue
		case strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: "):
			g.TimedOut = g.TimedOut || strings.HasPrefix(line, "panic: test timed out")
			if len(g.Panic) == 0 {
				g.Panic = append(g.Panic, line)
				inPanic = true
			}
		}
		if hm, hc, ok := parseHookLine(line); ok {
			switch {
			case hm != nil:
				g.HookMatrix = append(g.HookMatrix, *hm)
			case hc != nil:
				g.Hooks = append(g.Hooks, *hc)
			default:
				g.Malformed = append(g.Malformed, strings.TrimSpace(line))
			}
		}
		if current != "" {
			output[current] = append(output[current], strings.TrimSpace(line))
		}
	}
	for i, tc := range g.Tests {
		if tc.Status != statusPass {
			g.Tests[i].Output = headTail(output[tc.Name])
		}
	}
	for _, name := range startOrder {
		if started[name] {
			g.Unfinished = append(g.Unfinished, name)
		}
	}
	return g
}

// headTail keeps the first and last lines of a test's output.
func headTail(lines []string) []string {
	if len(lines) <= outputHead+outputTail {
		return lines
	}
	out := slices.Clone(lines[:outputHead])
	out = append(out, fmt.Sprintf("[%d lines left out]", len(lines)-outputHead-outputTail))
	return append(out, lines[len(lines)-outputTail:]...)
}

// Counts returns the number of passed, failed and skipped top-level tests
// (subtests are in Tests but not counted: a test fails with its subtests).
func (g GoTest) Counts() (pass, fail, skip int) {
	for _, tc := range g.Tests {
		if strings.Contains(tc.Name, "/") {
			continue
		}
		switch tc.Status {
		case statusPass:
			pass++
		case statusFail:
			fail++
		case statusSkip:
			skip++
		}
	}
	return
}

// Failed returns the failed tests that have no failed subtest: where the
// failures are, without their parents.
func (g GoTest) Failed() []TestCase {
	var out []TestCase
	for _, tc := range g.Tests {
		if tc.Status != statusFail {
			continue
		}
		if slices.ContainsFunc(g.Tests, func(o TestCase) bool {
			return o.Status == statusFail && strings.HasPrefix(o.Name, tc.Name+"/")
		}) {
			continue
		}
		out = append(out, tc)
	}
	return out
}
