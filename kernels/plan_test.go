package main

import (
	"slices"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

func TestEnvNamesMatchBpftest(t *testing.T) {
	if requireEnv != bpftest.RequireEnv || hookOrderEnv != bpftest.HookOrderEnv || requireStacksEnv != teststack.RequireStacksEnv {
		t.Errorf("plan sets %s, %s and %s, the tests read %s, %s and %s", requireEnv, hookOrderEnv, requireStacksEnv,
			bpftest.RequireEnv, bpftest.HookOrderEnv, teststack.RequireStacksEnv)
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
	// 4 default runs, then stream and handshake for 5 hook types.
	if len(guest) != 4+2*5 {
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
	names := func(skips []Skip) []string {
		var out []string
		for _, s := range skips {
			out = append(out, s.Test)
		}
		return out
	}
	if r := ids["kprobe/stream"]; r.SameAs != "" || len(r.Skips) != 0 || len(r.Only) == 0 || r.Only[0] != "TestHooksInUse" {
		t.Errorf("kprobe/stream: same as %q, skips %v, only %v", r.SameAs, names(r.Skips), r.Only)
	}
	if r := ids["kprobe/handshake"]; len(r.Only) != 0 || !slices.Contains(names(r.Skips), "TestEveryHookTypeOrAClearRefusal") {
		t.Errorf("kprobe/handshake: only %v, skips %v", r.Only, names(r.Skips))
	}
	if _, ok := ids["kprobe/receiver"]; ok {
		t.Error("the receiver runs per hook type")
	}
	if r := ids["default/receiver"]; len(r.Only) == 0 || r.Only[0] != "TestStreamMetricsAndSpans" {
		t.Errorf("default/receiver in the guests: only %v", r.Only)
	}
	if _, ok := ids["tp_btf/xdp"]; ok {
		t.Error("xdp runs per hook type")
	}
	if r := ids["default/xdp"]; !slices.Contains(names(r.Skips), "TestInterfaceDisappears") || slices.Contains(names(r.Skips), "TestFrames") {
		t.Errorf("default/xdp skips %v", names(r.Skips))
	}
	if last := guest[len(guest)-1]; last.ID != "default/receiver" {
		t.Errorf("the guests' last run is %s, want default/receiver", last.ID)
	}
	native := BuildPlan(pkgs, false, time.Minute)
	for _, r := range native {
		for _, s := range r.Skips {
			if slices.Contains(guestSkips, s) {
				t.Errorf("native %s skips %s", r.ID, s.Test)
			}
		}
	}
	for _, r := range native {
		if r.ID == "default/receiver" && len(r.Only) != 0 {
			t.Errorf("native default/receiver runs only %v", r.Only)
		}
	}
	if len(native[0].Skips) != 0 {
		t.Errorf("native default/stream skips %v", names(native[0].Skips))
	}
}

func TestSkipReasons(t *testing.T) {
	for _, s := range append(slices.Clone(guestSkips), hookRunSkips...) {
		if s.Reason == "" || s.Test == "" || s.Dir == "" {
			t.Errorf("incomplete skip entry %+v", s)
		}
	}
}

func TestSelectRuns(t *testing.T) {
	pkgs := []Package{
		{Dir: "internal/stream", Binary: "stream.test", Capability: "stream"},
		{Dir: "internal/xdp", Binary: "xdp.test", Capability: "xdp"},
	}
	plan := BuildPlan(pkgs, true, time.Minute)
	if got := SelectRuns(plan, nil, nil); len(got) != len(plan) {
		t.Errorf("no selection kept %d of %d runs", len(got), len(plan))
	}
	got := SelectRuns(plan, []string{"fentry/*", "default/xdp"}, []string{"TestA", "TestB"})
	if len(got) != 2 || got[0].ID != "default/xdp" || got[1].ID != "fentry/stream" {
		t.Fatalf("selected %+v", got)
	}
	if got[1].SameAs != "" {
		t.Error("fentry/stream stands in for default/stream, which was not selected: it must run itself")
	}
	for _, r := range got {
		if !slices.Equal(r.Only, []string{"TestA", "TestB"}) {
			t.Errorf("%s runs %v", r.ID, r.Only)
		}
	}
}
