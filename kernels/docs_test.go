package main

import (
	"strings"
	"testing"
)

func TestFillBlock(t *testing.T) {
	doc := []byte("intro\n" + readmeBegin + "\nold table\n" + readmeEnd + "\nrest\n")
	got, err := fillBlock(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + readmeBegin + "\nnew table\n" + readmeEnd + "\nrest\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := fillBlock([]byte("no markers"), "x"); err == nil {
		t.Error("a README without the block was accepted")
	}
}

// TestDocsComeFromTheMatrix: the README's table and docs/kernels.md say
// what the runs' HOOKS lines and verdicts say, kernel by kernel.
func TestDocsComeFromTheMatrix(t *testing.T) {
	run := func(c, hook string, ok bool, hooks ...HookChoice) RunResult {
		return RunResult{ID: hook + "/" + c, Hook: hook, Capability: c, OK: ok, Hooks: hooks}
	}
	old := Row{Name: "debian11", Distro: "Debian 11", Uname: "5.10.0", Finished: true, Runs: []RunResult{
		run("stream", defaultHook, true,
			HookChoice{"stream", "sock_send_length", "fentry"}, HookChoice{"stream", "inet_sock_set_state", "fentry"},
			HookChoice{"stream", "state_storage", "map"}),
		run("handshake", defaultHook, true, HookChoice{"handshake", "inet_sock_set_state", "fentry"}),
		run("stream", "kprobe", false),
	}, HookMatrix: []HookMatrix{
		{"stream", "sock_send_length", "kprobe", "attached", ""},
		{"stream", "sock_send_length", "tp_btf", "refused", "this kernel has no tracepoint sock:sock_send_length"},
	}}
	m := &Matrix{Date: "2026-11-30T21:45:00Z", Commit: "0123456789abcdef", Hooks: Hooks(),
		Capabilities: []string{"stream", "handshake"}, Rows: []Row{old}}
	m.Tally()
	readme := m.ReadmeBlock("kernels/results/matrix.md")
	for _, want := range []string{
		"| Debian 11 (5.10.0) | stream: fentry; handshake: fentry; state: map | **FAIL**: kprobe/stream |",
		"commit 0123456789ab",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("README block lacks %q:\n%s", want, readme)
		}
	}
	doc := m.KernelsDoc("kernels/results/matrix.md")
	for _, want := range []string{
		"(../kernels/results/matrix.md)",
		"| stream     | sock_send_length    | fentry ",
		"| stream     | state_storage       | map ",
		"- debian11: stream sock_send_length: this kernel has no tracepoint sock:sock_send_length",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs lack %q:\n%s", want, doc)
		}
	}
}
