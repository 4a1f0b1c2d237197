package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleMatrix builds a matrix the way run does, from sessions, so the
// report is tested on what the parser makes of real-looking output.
func sampleMatrix(t *testing.T) *Matrix {
	t.Helper()
	pkgs := []Package{
		{Dir: "internal/stream", Binary: "stream.test", Capability: "stream"},
		{Dir: "internal/xdp", Binary: "xdp.test", Capability: "xdp"},
	}
	plan := BuildPlan(pkgs, true, time.Minute)
	var lines []Line
	add := func(text string) {
		lines = append(lines, Line{At: time.Duration(len(lines)) * time.Second, Text: text})
	}
	add("@@twk boot")
	add("@@twk kernel 6.1.0-50-cloud-amd64")
	for _, r := range plan {
		if r.SameAs != "" {
			continue
		}
		add("@@twk begin " + r.ID)
		add("@@twk out " + r.ID + " === RUN   TestA")
		add("@@twk out " + r.ID + "     a_test.go:9: HOOKS capability=stream point=sock_send_length kind=" + map[bool]string{true: "fentry", false: r.Hook}[r.Hook == "default"])
		if r.ID == "tracepoint/stream" {
			add("@@twk out " + r.ID + "     a_test.go:11: want 5 chunks, got 1")
			add("@@twk out " + r.ID + " --- FAIL: TestA (1.00s)")
			add("@@twk out " + r.ID + " FAIL")
			add("@@twk end " + r.ID + " rc=1")
			continue
		}
		if r.ID == "kprobe/stream" {
			add("@@twk out " + r.ID + "     a_test.go:10: HOOKMATRIX capability=stream point=sock_send_length kind=tp_btf result=refused reason=no such tracepoint | here")
			add("@@twk out " + r.ID + "     a_test.go:10: HOOKMATRIX capability=stream point=sock_send_length kind=kprobe result=attached reason=")
			add("@@twk out " + r.ID + "     a_test.go:11: want 5 chunks, got 0")
			add("@@twk out " + r.ID + " --- FAIL: TestA (1.00s)")
			add("@@twk out " + r.ID + " FAIL")
			add("@@twk end " + r.ID + " rc=1")
			continue
		}
		add("@@twk out " + r.ID + " --- PASS: TestA (1.00s)")
		add("@@twk out " + r.ID + " PASS")
		add("@@twk end " + r.ID + " rc=0")
	}
	add("@@twk done")
	base := Row{Name: "debian12", Distro: "Debian 12 bookworm", Version: "6.1.176-1", Mode: "qemu", URL: "http://example/k.deb", SHA256: strings.Repeat("a", 64),
		Reboots: []Reboot{{Problem: "Kernel panic - not syncing: Fatal exception in interrupt", Seconds: 21.25, ConsoleLog: "logs/debian12.boot1.log"},
			{Problem: "Oops: int3; Kernel panic", Seconds: 1271.5, ConsoleLog: "logs/debian12.boot2.log", Kept: []string{"default/stream", "default/xdp"}}}}
	guest := BuildRow(base, plan, Exec{Lines: lines, Wall: time.Duration(len(lines)) * time.Second, CPU: 5 * time.Second}, ParseSession(lines), time.Hour, nil)
	// A guest that never booted.
	deadLines := []Line{{Text: "Kernel panic - not syncing: VFS"}}
	dead := BuildRow(Row{Name: "debian11", Mode: "qemu"}, plan, Exec{Lines: deadLines, Wall: time.Second}, ParseSession(deadLines), time.Hour, nil)
	m := &Matrix{Date: "2026-11-30T00:00:00Z", Commit: "abc", Hooks: Hooks(), Capabilities: []string{"stream", "xdp"},
		Rows: []Row{guest, dead}, Excluded: SkipsOf(guestSkips, pkgs), HookRunSkips: SkipsOf(hookRunSkips, pkgs), Jobs: 2,
		HookRunOnly: []Only{{Dir: "receiver/tokenwirereceiver", Tests: []string{"TestA", "TestB"}, Reason: "because"}}}
	m.Tally()
	return m
}

func TestReport(t *testing.T) {
	m := sampleMatrix(t)
	// Per row: default stream and xdp, then stream for tp_btf,
	// raw_tracepoint, tracepoint and kprobe (fentry repeats default).
	if m.Cells != 12 || m.Failed != 8 || m.OK() {
		t.Fatalf("cells %d failed %d", m.Cells, m.Failed)
	}
	guest := m.Rows[0]
	if guest.OK() || !guest.Finished || guest.BootSeconds != 0 || guest.TestSeconds == 0 || guest.CPUSeconds != 5 {
		t.Errorf("guest row %+v", guest)
	}
	if c, _ := guest.Cell("stream", "fentry"); c.SameAs != "default/stream" || !c.OK {
		t.Errorf("fentry cell %+v, want the default run's", c)
	}
	if c, _ := guest.Cell("stream", "kprobe"); c.OK || c.Failed != 1 || len(c.Failures) != 1 {
		t.Errorf("kprobe cell %+v", c)
	}
	if len(guest.HookMatrix) != 2 {
		t.Errorf("hook matrix %+v", guest.HookMatrix)
	}
	// Compare with the column padding squeezed out.
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	md := m.Markdown()
	flat := squeeze(md)
	for _, want := range []string{
		"**8 of 12 cells failed.**",
		"| debian12 | pass 1/0/0 | = default | pass 1/0/0 | pass 1/0/0 | **FAIL** 0/1/0 | **FAIL** 0/1/0 |",
		"| debian11 | **FAIL** (not run) | = default | **FAIL** (not run) |",
		"| debian12 | pass 1/0/0 | - | - | - | - | - |", // xdp runs with the default order only
		"- **debian11**: the guest never reached /init; Kernel panic - not syncing: VFS (6 runs never started)",
		"| stream | sock_send_length | ? | refused | ? | ? | attached |",
		"- stream sock_send_length tp_btf: refused: no such tracepoint | here",
		"| stream | sock_send_length | fentry | = default | tp_btf | raw_tracepoint | tracepoint | kprobe |",
		"- **debian12 tracepoint/stream** (internal/stream): 1 failed: TestA\n  - TestA\n    ```\n    a_test.go:9: HOOKS",
		"a_test.go:11: want 5 chunks, got 1",
		// The same test failing again in the row: its output once.
		"- **debian12 kprobe/stream** (internal/stream): 1 failed: TestA\n  - TestA: output shown under tracepoint/stream",
		"| internal/xdp | TestVethDropsBlocklistedSources |",
		"| kprobe/stream | 8.0 | - |",
		"The forced-hook runs of receiver/tokenwirereceiver take only TestA, TestB; its other tests run in the default run. Why: because.",
		"- debian12: `Kernel panic - not syncing: Fatal exception in interrupt` after 21.2 s, before /init (console log `logs/debian12.boot1.log`); booted again",
		"- debian12: `Oops: int3; Kernel panic` after 1271.5 s, after 2 runs had ended (default/stream, default/xdp), which stand (console log `logs/debian12.boot2.log`); booted again",
	} {
		if !strings.Contains(flat, squeeze(want)) {
			t.Errorf("matrix.md lacks %q:\n%s", want, md)
		}
	}

	if f := m.FailuresSection(); !strings.HasPrefix(f, "## Failures") || !strings.Contains(f, "want 5 chunks, got 1") || !strings.Contains(md, f) {
		t.Errorf("failures section, printed again at the end of a failed run:\n%s", f)
	}
	if f := (&Matrix{}).FailuresSection(); f != "" {
		t.Errorf("a matrix with no failure has a failures section: %q", f)
	}

	dir := t.TempDir()
	if err := m.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "matrix.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Matrix
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Failed != 8 || len(back.Rows) != 2 || len(back.Rows[0].Runs) != len(guest.Runs) || back.Rows[0].HookMatrix[0].Reason == "" || len(back.Rows[0].Reboots) != 2 || len(back.Rows[0].Reboots[1].Kept) != 2 {
		t.Errorf("matrix.json does not round-trip: %+v", back)
	}
}

func TestTable(t *testing.T) {
	got := table([]string{"a", "bb"}, [][]string{{"x|y", "z"}})
	want := "| a    | bb  |\n| ---- | --- |\n| x\\|y | z   |\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestCodeBlockCutsLongLines(t *testing.T) {
	long := strings.Repeat("x", maxLineLen+10)
	got := codeBlock([]string{"short", long}, "  ")
	want := "  ```\n  short\n  " + strings.Repeat("x", maxLineLen) + " [10 more bytes]\n  ```\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
