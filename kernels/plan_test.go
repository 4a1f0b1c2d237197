package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

func TestEnvNamesMatchBpftest(t *testing.T) {
	if requireEnv != bpftest.RequireEnv || hookOrderEnv != bpftest.HookOrderEnv {
		t.Errorf("plan sets %s and %s, the tests read %s and %s", requireEnv, hookOrderEnv, bpftest.RequireEnv, bpftest.HookOrderEnv)
	}
}

func TestBuildPlan(t *testing.T) {
	pkgs := []Package{
		{Dir: "internal/stream", Binary: "stream.test", Capability: "stream"},
		{Dir: "internal/handshake", Binary: "handshake.test", Capability: "handshake"},
		{Dir: "internal/xdp", Binary: "xdp.test", Capability: "xdp"},
		{Dir: "receiver/tokenwirereceiver", Binary: "tokenwirereceiver.test", Capability: "receiver"},
	}
	guest := BuildPlan(pkgs, true, time.Minute)
	// 4 default runs, then stream, handshake and receiver for 5 hook types.
	if len(guest) != 4+3*5 {
		t.Fatalf("%d runs", len(guest))
	}
	ids := map[string]Run{}
	for _, r := range guest {
		if _, dup := ids[r.ID]; dup {
			t.Errorf("run %s twice", r.ID)
		}
		ids[r.ID] = r
	}
	if r := ids["fentry/stream"]; r.SameAs != "default/stream" {
		t.Errorf("fentry/stream: same as %q; forcing fentry gives the default order", r.SameAs)
	}
	if r := ids["kprobe/stream"]; r.SameAs != "" || r.SkipPattern() != "" || !strings.HasPrefix(r.RunPattern(), "^(TestHooksInUse|") {
		t.Errorf("kprobe/stream: same as %q, skip %q, run %q", r.SameAs, r.SkipPattern(), r.RunPattern())
	}
	if r := ids["kprobe/handshake"]; r.RunPattern() != "" || !strings.Contains(r.SkipPattern(), "TestEveryHookTypeOrAClearRefusal") {
		t.Errorf("kprobe/handshake: run %q, skip %q", r.RunPattern(), r.SkipPattern())
	}
	if r := ids["kprobe/receiver"]; r.RunPattern() != "^(TestHandshakeMetricsAreExact|TestStreamMetricsAndSpans|TestShutdownReportsEveryEndedStream)$" {
		t.Errorf("kprobe/receiver runs %q", r.RunPattern())
	}
	if r := ids["default/receiver"]; r.RunPattern() != "" {
		t.Errorf("default/receiver runs %q, want every test", r.RunPattern())
	}
	if _, ok := ids["tp_btf/xdp"]; ok {
		t.Error("xdp runs per hook type")
	}
	re := regexp.MustCompile(ids["default/xdp"].SkipPattern())
	if !re.MatchString("TestInterfaceDisappears") || re.MatchString("TestInterfaceDisappearsNot") || re.MatchString("TestFrames") {
		t.Errorf("xdp skip pattern %q", re)
	}
	native := BuildPlan(pkgs, false, time.Minute)
	for _, r := range native {
		for _, s := range r.Skips {
			if slices.Contains(guestSkips, s) {
				t.Errorf("native %s skips %s", r.ID, s.Test)
			}
		}
	}
	if p := native[0].SkipPattern(); p != "" {
		t.Errorf("native default/stream skips %q", p)
	}
}

func TestSkipReasons(t *testing.T) {
	for _, s := range append(slices.Clone(guestSkips), hookRunSkips...) {
		if s.Reason == "" || s.Test == "" || s.Dir == "" {
			t.Errorf("incomplete skip entry %+v", s)
		}
	}
}
