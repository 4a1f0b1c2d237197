// Package hook picks how a BPF program attaches to the kernel: the cheapest
// hook type that the running kernel accepts.
//
// The choice is made by trying, never by kernel version: a kernel can have
// the BTF for fentry and still refuse it (EPERM under some lockdown
// settings), or lack CONFIG_KPROBES. Any error from a candidate therefore
// means "not available here" and the next one is tried.
package hook

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// Kind is a hook type.
type Kind string

// Hook types, cheapest first (see shared/seeds/004 and KERNEL.md's cost table).
const (
	Fentry        Kind = "fentry"
	TPBTF         Kind = "tp_btf"
	RawTracepoint Kind = "raw_tracepoint"
	Tracepoint    Kind = "tracepoint"
	Kprobe        Kind = "kprobe"
)

// DefaultOrder is the order in which hook types are tried when the user
// does not say otherwise.
var DefaultOrder = []Kind{Fentry, TPBTF, RawTracepoint, Tracepoint, Kprobe}

// ParseKind returns the Kind named s, or an error listing the valid names.
func ParseKind(s string) (Kind, error) {
	for _, k := range DefaultOrder {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(DefaultOrder))
	for i, k := range DefaultOrder {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown hook type %q (valid: %s)", s, strings.Join(names, ", "))
}

// Attach loads and attaches one variant of a program. The returned Closer
// detaches and unloads it.
type Attach func() (io.Closer, error)

// Attempt records a hook type that was tried and refused.
type Attempt struct {
	Kind Kind
	Err  error
}

// Choice is the outcome of Choose.
type Choice struct {
	// Kind is the hook type that attached.
	Kind Kind
	// Closer detaches what Kind attached.
	Closer io.Closer
	// Refused lists the hook types tried before Kind, with their errors.
	Refused []Attempt
}

// Choose walks order and returns the first hook type whose variant attaches.
// Kinds missing from variants (the capability has no program for them) are
// passed over silently. When nothing attaches the error names every attempt.
func Choose(order []Kind, variants map[Kind]Attach) (Choice, error) {
	var refused []Attempt
	for _, k := range order {
		attach, ok := variants[k]
		if !ok {
			continue
		}
		c, err := attach()
		if err == nil {
			return Choice{Kind: k, Closer: c, Refused: refused}, nil
		}
		refused = append(refused, Attempt{Kind: k, Err: err})
	}
	if len(refused) == 0 {
		return Choice{}, errors.New("no hook type in the preference list has a program for this capability")
	}
	errs := make([]error, len(refused))
	for i, a := range refused {
		errs[i] = fmt.Errorf("%s: %w", a.Kind, a.Err)
	}
	return Choice{Refused: refused}, fmt.Errorf("no hook type works on this kernel: %w", errors.Join(errs...))
}

// Summary describes a choice in one line for the startup log.
func (c Choice) Summary() string {
	var b strings.Builder
	b.WriteString(string(c.Kind))
	for i, a := range c.Refused {
		if i == 0 {
			b.WriteString(" (refused: ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %v", a.Kind, a.Err)
		if i == len(c.Refused)-1 {
			b.WriteString(")")
		}
	}
	return b.String()
}
