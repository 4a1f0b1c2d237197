package bpftest

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/tokenwire/tokenwire/internal/hook"
)

// HookOrderEnv names the environment variable that puts hook types first
// in every test's hook order (comma-separated, e.g. "kprobe" or
// "fentry,kprobe"). The kernel matrix (make kernels) runs the suites once
// per hook type this way, so each type runs for real on each kernel; a
// hook point that has no program of the forced type, or whose kernel
// refuses it, falls back to the rest of the default order, and the tests
// log what attached.
const HookOrderEnv = "TOKENWIRE_HOOK_ORDER"

// HookOrder returns the hook order tests should use: the kinds named in
// HookOrderEnv first, then the rest of hook.DefaultOrder. An invalid value
// panics: a matrix run with a typo must not quietly test the default.
func HookOrder() []hook.Kind {
	v := os.Getenv(HookOrderEnv)
	if v == "" {
		return slices.Clone(hook.DefaultOrder)
	}
	var order []hook.Kind
	for _, s := range strings.Split(v, ",") {
		k, err := hook.ParseKind(strings.TrimSpace(s))
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", HookOrderEnv, v, err))
		}
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	for _, k := range hook.DefaultOrder {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	return order
}

// HookPreference is HookOrder as the receiver's hook_preference strings.
func HookPreference() []string {
	order := HookOrder()
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = string(k)
	}
	return out
}
