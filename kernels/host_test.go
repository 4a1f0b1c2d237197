package main

import "testing"

func TestBusySecondsCounts(t *testing.T) {
	a := busySeconds()
	for i := 0; i < 3e7; i++ { // a few ms of work
		_ = i * i
	}
	if b := busySeconds(); a <= 0 || b < a {
		t.Errorf("busy %v then %v", a, b)
	}
	if hostRelease() == "unknown" || osRelease() == "" {
		t.Errorf("host %q %q", hostRelease(), osRelease())
	}
}
