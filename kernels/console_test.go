package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseSession(t *testing.T) {
	at := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	lines := []Line{
		{at(0.1), "SeaBIOS (version 1.16.2-debian-1.16.2-1)"},
		{at(2.0), "\x1bc\x1b[?7l\x1b[2J@@twk boot\r"},
		{at(2.05), "@@twk kernel 6.1.0-50-cloud-amd64"},
		{at(2.1), "@@twk begin default/stream"},
		{at(2.2), "@@twk out default/stream === RUN   TestA"},
		{at(2.3), "[   12.345678] some kernel message that reached the console"},
		{at(2.4), "@@twk out default/stream "}, // an empty output line
		{at(3.0), "@@twk out default/stream --- PASS: TestA (0.80s)"},
		{at(3.1), "@@twk end default/stream rc=0"},
		{at(3.2), "@@twk begin default/xdp"},
		{at(3.3), "@@twk out default/xdp === RUN   TestB"},
		{at(4.0), "@@twk done"},
		{at(4.1), "@@twk dmesg [    0.000000] Linux version 6.1.0"},
		{at(4.2), "@@twk bogus verb"},
	}
	s := ParseSession(lines)
	if !s.Booted || s.BootAt != at(2.0) || s.Uname != "6.1.0-50-cloud-amd64" || !s.Done || s.DoneAt != at(4.0) {
		t.Fatalf("session %+v", s)
	}
	st := s.Runs["default/stream"]
	if !st.Begun || !st.Ended || st.RC != 0 || st.Duration() != at(1.0) {
		t.Errorf("stream run %+v", st)
	}
	if diff := cmp.Diff([]string{"=== RUN   TestA", "", "--- PASS: TestA (0.80s)"}, st.Lines); diff != "" {
		t.Errorf("stream lines (-want +got):\n%s", diff)
	}
	x := s.Runs["default/xdp"]
	if !x.Begun || x.Ended || x.RC != -1 || x.Duration() != 0 {
		t.Errorf("xdp run %+v, want begun, not ended", x)
	}
	if len(s.Dmesg) != 1 || len(s.Other) != 3 {
		t.Errorf("dmesg %q, other %q", s.Dmesg, s.Other)
	}
}
