package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeTest stands in for a test binary: it prints what the plan gave it
// and fails under one hook order, so the whole protocol (script, prefix
// loop, exit codes, parser) is checked with the host's sh, without qemu.
const fakeTest = `#!/bin/sh
if [ "$1" = -test.list ]; then
	printf 'TestEnv\nTestHandshakeAcrossNamespaces\nBenchmarkEnv\nTestEveryHookTypeOrAClearRefusal\n'
	exit 0
fi
name=${*##*-test.run=^}
name=${name%%$}
if [ "$name" = TestHandshakeAcrossNamespaces ]; then
	echo "a skipped test ran"
	exit 3
fi
echo "=== RUN   $name"
echo "    env_test.go:1: cwd=$(pwd) order=[$TOKENWIRE_HOOK_ORDER] require=$TOKENWIRE_REQUIRE_BPF"
echo "    env_test.go:2: args: $*"
printf '    env_test.go:3: a backslash \\n stays, and so does %%s\n'
if [ "$TOKENWIRE_HOOK_ORDER" = tracepoint ]; then
	echo "--- FAIL: $name (0.00s)"
	echo FAIL
	exit 1
fi
if [ "$TOKENWIRE_HOOK_ORDER" = kprobe ]; then
	echo "panic: boom"
	exit 2
fi
echo "--- PASS: $name (0.00s)"
printf PASS
`

// fakePlan writes the guest plan of one package whose test binary is
// fakeTest, and returns its root, script and runs.
func fakePlan(t *testing.T) (root, script string, pkg Package, plan []Run) {
	t.Helper()
	root = t.TempDir()
	pkg = Package{Dir: "internal/handshake", Binary: "handshake.test", Capability: "handshake"}
	for _, d := range []string{"bin", pkg.Dir} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin", pkg.Binary), []byte(fakeTest), 0o755); err != nil {
		t.Fatal(err)
	}
	plan = BuildPlan([]Package{pkg}, true, time.Minute)
	script = filepath.Join(root, "plan.sh")
	if err := os.WriteFile(script, []byte(PlanScript(plan)), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, script, pkg, plan
}

func TestPlanScriptNatively(t *testing.T) {
	root, script, pkg, plan := fakePlan(t)
	t.Setenv("TOKENWIRE_HOOK_ORDER", "kprobe") // the script must clear it for the default run
	e := RunNative(context.Background(), root, script, time.Minute, filepath.Join(t.TempDir(), "log"), nil)
	if e.Err != nil {
		t.Fatal(e.Err)
	}
	row := BuildRow(Row{Name: nativeRow, Mode: "native"}, plan, e, ParseSession(e.Lines), time.Minute, nil)
	if !row.Finished || row.Problem != "" {
		t.Fatalf("row %+v", row)
	}
	got := map[string]RunResult{}
	for _, r := range row.Runs {
		got[r.ID] = r
	}
	def := got["default/handshake"]
	if !def.OK || def.Passed != 2 {
		t.Fatalf("default run %+v", def)
	}
	tail := func(r RunResult) string { return strings.Join(rawLines(e, r.ID), "\n") }
	for _, want := range []string{
		"cwd=" + filepath.Join(root, pkg.Dir) + " order=[] require=1",
		"args: -test.v -test.count=1 -test.timeout=60s -test.run=^TestEnv$",
		"args: -test.v -test.count=1 -test.timeout=60s -test.run=^TestEveryHookTypeOrAClearRefusal$",
		`a backslash \n stays, and so does %s`,
	} {
		if !strings.Contains(tail(def), want) {
			t.Errorf("default run output lacks %q:\n%s", want, tail(def))
		}
	}
	if r := got["tp_btf/handshake"]; !r.OK || r.Passed != 1 || !strings.Contains(tail(r), "order=[tp_btf]") {
		t.Errorf("tp_btf run:\n%s", tail(got["tp_btf/handshake"]))
	}
	if r := got["fentry/handshake"]; !r.OK || r.SameAs == "" || len(rawLines(e, r.ID)) != 0 {
		t.Errorf("fentry run %+v was executed or not taken from the default run", r)
	}
	if r := got["tracepoint/handshake"]; r.OK || r.ExitCode != 1 || r.Failed != 1 {
		t.Errorf("tracepoint run %+v", r)
	}
	if r := got["kprobe/handshake"]; r.OK || r.ExitCode != 2 || !strings.HasPrefix(r.Problem, "crashed in TestEnv: panic: boom") {
		t.Errorf("kprobe run %+v", r)
	}
}

// A boot resumed after a panic (BootAgain) skips the runs the one before
// ended, and the row takes their results from it.
func TestPlanScriptSkipsKeptRuns(t *testing.T) {
	root, script, _, plan := fakePlan(t)
	first := RunNative(context.Background(), root, script, time.Minute, filepath.Join(t.TempDir(), "log"), nil)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	runs := ParseSession(first.Lines).Runs
	kept := map[string]*RunOutput{"default/handshake": runs["default/handshake"], "tracepoint/handshake": runs["tracepoint/handshake"]}
	t.Setenv("TWK_SKIP", "default/handshake tracepoint/handshake")
	second := RunNative(context.Background(), root, script, time.Minute, filepath.Join(t.TempDir(), "log"), nil)
	if second.Err != nil {
		t.Fatal(second.Err)
	}
	s := ParseSession(second.Lines)
	if !s.Done || s.Runs["default/handshake"] != nil || s.Runs["tracepoint/handshake"] != nil || s.Runs["tp_btf/handshake"] == nil {
		t.Fatalf("second session ran %v, want every run but the skipped ones", slices.Collect(maps.Keys(s.Runs)))
	}
	row := BuildRow(Row{Name: "debian13", Mode: "qemu"}, plan, second, s, time.Minute, kept)
	got := map[string]RunResult{}
	for _, r := range row.Runs {
		got[r.ID] = r
	}
	if r := got["default/handshake"]; !r.OK || r.Passed != 2 {
		t.Errorf("kept default run %+v", r)
	}
	if r := got["tracepoint/handshake"]; r.OK || r.ExitCode != 1 || r.Failed != 1 {
		t.Errorf("kept tracepoint run %+v: its failure must stand", r)
	}
	if r := got["tp_btf/handshake"]; !r.OK || r.Passed != 1 {
		t.Errorf("tp_btf run of the second session %+v", r)
	}
}

// rawLines returns the output lines of run id as the parser saw them.
func rawLines(e Exec, id string) []string {
	if r := ParseSession(e.Lines).Runs[id]; r != nil {
		return r.Lines
	}
	return nil
}

// TestCancelKillsTheTestBinary: Ctrl-C of the runner (a cancelled
// context) must not leave a test binary running behind timeout(1).
func TestCancelKillsTheTestBinary(t *testing.T) {
	root := t.TempDir()
	pkg := Package{Dir: "internal/xdp", Binary: "xdp.test", Capability: "xdp"}
	for _, d := range []string{"bin", pkg.Dir} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pidFile := filepath.Join(root, "pid")
	sleeper := "#!/bin/sh\necho $$ > " + pidFile + "\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(root, "bin", pkg.Binary), []byte(sleeper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "plan.sh")
	if err := os.WriteFile(script, []byte(PlanScript(BuildPlan([]Package{pkg}, false, time.Minute))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Exec)
	go func() { done <- RunNative(ctx, root, script, time.Minute, filepath.Join(t.TempDir(), "log"), nil) }()
	var pid string
	for deadline := time.Now().Add(10 * time.Second); pid == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		pid = strings.TrimSpace(string(b))
	}
	if pid == "" {
		t.Fatal("the fake test binary never started")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RunNative did not return after cancel")
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat("/proc/" + pid); os.IsNotExist(err) {
			return
		}
	}
	t.Errorf("the test binary (pid %s) outlived the runner's cancel", pid)
}
