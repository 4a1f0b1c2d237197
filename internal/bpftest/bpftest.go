// Package bpftest holds helpers shared by tests that load real BPF programs.
package bpftest

import (
	"os"
	"testing"

	"github.com/cilium/ebpf/rlimit"
)

// RequireEnv names the environment variable that turns "BPF unavailable"
// skips into failures. .ci/run and `make test` set it.
const RequireEnv = "TOKENWIRE_REQUIRE_BPF"

// Require skips the test when this process cannot load BPF programs (not
// root, no kernel BTF), or fails it when RequireEnv is set.
func Require(tb testing.TB) {
	tb.Helper()
	var why string
	switch {
	case os.Geteuid() != 0:
		why = "not running as root"
	default:
		if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
			why = "no kernel BTF: " + err.Error()
		}
	}
	if why == "" {
		// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK, as the
		// receiver's Start knows; tests that open tracers directly must
		// lift it too.
		if err := rlimit.RemoveMemlock(); err != nil {
			tb.Fatalf("raising RLIMIT_MEMLOCK: %v", err)
		}
		return
	}
	if os.Getenv(RequireEnv) != "" {
		tb.Fatalf("BPF unavailable (%s) but %s is set", why, RequireEnv)
	}
	tb.Skipf("BPF unavailable: %s (set %s=1 to make this a failure)", why, RequireEnv)
}

// RequireTracefs does the same for tests that need tracefs mounted at
// /sys/kernel/tracing (classic tracepoints).
func RequireTracefs(tb testing.TB) {
	tb.Helper()
	Require(tb)
	if _, err := os.Stat("/sys/kernel/tracing/events"); err == nil {
		return
	}
	msg := "tracefs is not mounted at /sys/kernel/tracing (mount -t tracefs tracefs /sys/kernel/tracing)"
	if os.Getenv(RequireEnv) != "" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}
