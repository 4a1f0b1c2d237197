package bpftest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/tokenwire/tokenwire/internal/hook"
)

// ExpectHooksEnv names the environment variable that lists the hook types
// that must attach wherever the kernel has their target (comma-separated).
// Unset, it holds what this project's build machines allow (KERNEL.md):
// tp_btf, raw_tracepoint and tracepoint; fentry is refused there (EPERM)
// and kprobes are not built in. The kernel matrix sets it per kernel.
const ExpectHooksEnv = "TOKENWIRE_EXPECT_HOOKS"

var buildMachineHooks = []hook.Kind{hook.TPBTF, hook.RawTracepoint, hook.Tracepoint}

// ExpectedHooks returns the hook types that must attach on this kernel.
func ExpectedHooks(tb testing.TB) []hook.Kind {
	tb.Helper()
	v := os.Getenv(ExpectHooksEnv)
	if v == "" {
		return slices.Clone(buildMachineHooks)
	}
	var out []hook.Kind
	for _, s := range strings.Split(v, ",") {
		k, err := hook.ParseKind(strings.TrimSpace(s))
		if err != nil {
			tb.Fatalf("%s=%q: %v", ExpectHooksEnv, v, err)
		}
		out = append(out, k)
	}
	return out
}

// Target is what a hook point attaches to: a tracepoint group/name for the
// tracepoint types, a kernel function for fentry/fexit and kprobes.
type Target struct {
	Group, Tracepoint, Function string
}

// KernelHas reports whether the running kernel has the target that a hook
// of kind k would attach to: the tracepoint's BTF type (tp_btf, raw), its
// tracefs event (classic) or the function in its BTF (fentry, kprobe).
// Whether the kernel then accepts the program is what the test checks.
func KernelHas(tb testing.TB, k hook.Kind, t Target) bool {
	tb.Helper()
	switch k {
	case hook.Tracepoint:
		_, err := os.Stat(fmt.Sprintf("/sys/kernel/tracing/events/%s/%s", t.Group, t.Tracepoint))
		return err == nil
	case hook.TPBTF, hook.RawTracepoint:
		return kernelType(tb, "btf_trace_"+t.Tracepoint, new(*btf.Typedef))
	case hook.Fentry, hook.Kprobe:
		return t.Function != "" && kernelType(tb, t.Function, new(*btf.Func))
	}
	return false
}

// kernelBTF is decoded once per test binary. It is not probe.KernelBTF:
// probe's own tests import this package.
var kernelBTF = btf.NewCache()

func kernelType[T btf.Type](tb testing.TB, name string, typ *T) bool {
	tb.Helper()
	spec, err := kernelBTF.Kernel()
	if err != nil {
		tb.Fatalf("reading kernel BTF: %v", err)
	}
	err = spec.TypeByName(name, typ)
	if err != nil && !errors.Is(err, btf.ErrNotFound) {
		tb.Fatalf("looking up %s in kernel BTF: %v", name, err)
	}
	return err == nil
}

// LogHookMatrix logs, in the form the kernel matrix collects, what became
// of hook type k at a hook point: attached, refused (with the kernel's
// reason) or none (no program of that type).
func LogHookMatrix(tb testing.TB, capability, point string, k hook.Kind, c hook.Choice) {
	tb.Helper()
	result, reason := "none", ""
	if c.Kind == k && c.Closer != nil {
		result = "attached"
	}
	for _, a := range c.Refused {
		if a.Kind == k {
			result, reason = "refused", strings.ReplaceAll(a.Err.Error(), "\n", " ")
		}
	}
	tb.Logf("HOOKMATRIX capability=%s point=%s kind=%s result=%s reason=%s", capability, point, k, result, reason)
}

// LogHooks logs which hook type attached at a hook point, in the form the
// kernel matrix collects.
func LogHooks(tb testing.TB, capability, point string, c hook.Choice) {
	tb.Helper()
	kind := "none"
	if c.Closer != nil {
		kind = string(c.Kind)
	}
	tb.Logf("HOOKS capability=%s point=%s kind=%s", capability, point, kind)
}
