package hook

import (
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"
)

type closer struct{ closed bool }

func (c *closer) Close() error { c.closed = true; return nil }

func ok(c *closer) Attach   { return func() (io.Closer, error) { return c, nil } }
func fail(err error) Attach { return func() (io.Closer, error) { return nil, err } }
func never(t *testing.T) Attach {
	return func() (io.Closer, error) { t.Fatal("tried a hook after one attached"); return nil, nil }
}

var errNoKprobes = errors.New("kprobe PMU not found")

func TestChooseFollowsOrder(t *testing.T) {
	tests := []struct {
		name     string
		order    []Kind
		variants func(c *closer) map[Kind]Attach
		want     Kind
		refused  []Kind
	}{
		{
			name:  "fentry works: nothing else is tried",
			order: DefaultOrder,
			variants: func(c *closer) map[Kind]Attach {
				return map[Kind]Attach{Fentry: ok(c), TPBTF: never(t), Kprobe: never(t)}
			},
			want: Fentry,
		},
		{
			name:  "this machine: fentry EPERM, tp_btf works",
			order: DefaultOrder,
			variants: func(c *closer) map[Kind]Attach {
				return map[Kind]Attach{Fentry: fail(syscall.EPERM), TPBTF: ok(c), RawTracepoint: never(t), Tracepoint: never(t), Kprobe: never(t)}
			},
			want:    TPBTF,
			refused: []Kind{Fentry},
		},
		{
			name:  "old kernel: only kprobe works",
			order: DefaultOrder,
			variants: func(c *closer) map[Kind]Attach {
				return map[Kind]Attach{
					Fentry: fail(syscall.EINVAL), TPBTF: fail(syscall.EINVAL),
					RawTracepoint: fail(errors.New("no such tracepoint")), Tracepoint: fail(errors.New("tracefs not mounted")),
					Kprobe: ok(c),
				}
			},
			want:    Kprobe,
			refused: []Kind{Fentry, TPBTF, RawTracepoint, Tracepoint},
		},
		{
			name:  "kinds without a variant are passed over",
			order: DefaultOrder,
			variants: func(c *closer) map[Kind]Attach {
				return map[Kind]Attach{Tracepoint: ok(c)}
			},
			want: Tracepoint,
		},
		{
			name:  "user order wins over the default",
			order: []Kind{Kprobe, Tracepoint},
			variants: func(c *closer) map[Kind]Attach {
				return map[Kind]Attach{Fentry: never(t), Kprobe: fail(errNoKprobes), Tracepoint: ok(c)}
			},
			want:    Tracepoint,
			refused: []Kind{Kprobe},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &closer{}
			got, err := Choose(tt.order, tt.variants(c))
			if err != nil {
				t.Fatalf("Choose: %v", err)
			}
			if got.Kind != tt.want {
				t.Fatalf("chose %s, want %s", got.Kind, tt.want)
			}
			if got.Closer != c {
				t.Fatal("Choice.Closer is not what the winning variant returned")
			}
			var refused []Kind
			for _, a := range got.Refused {
				refused = append(refused, a.Kind)
			}
			if strings.Join(kindsToStrings(refused), ",") != strings.Join(kindsToStrings(tt.refused), ",") {
				t.Fatalf("refused %v, want %v", refused, tt.refused)
			}
		})
	}
}

func TestChooseNothingWorks(t *testing.T) {
	_, err := Choose(DefaultOrder, map[Kind]Attach{
		Fentry: fail(syscall.EPERM),
		Kprobe: fail(errNoKprobes),
	})
	if err == nil {
		t.Fatal("Choose succeeded with no working hook")
	}
	for _, want := range []string{"fentry: operation not permitted", "kprobe: kprobe PMU not found"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !errors.Is(err, syscall.EPERM) {
		t.Error("error does not wrap the fentry EPERM")
	}
}

func TestChooseNoVariantInOrder(t *testing.T) {
	if _, err := Choose([]Kind{Fentry}, map[Kind]Attach{Kprobe: fail(errNoKprobes)}); err == nil {
		t.Fatal("Choose succeeded although no preferred kind has a program")
	}
}

func TestParseKind(t *testing.T) {
	for _, k := range DefaultOrder {
		got, err := ParseKind(string(k))
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
	if _, err := ParseKind("uprobe"); err == nil || !strings.Contains(err.Error(), "fentry, tp_btf, raw_tracepoint, tracepoint, kprobe") {
		t.Errorf("ParseKind(uprobe) error = %v, want one listing the valid names", err)
	}
}

func TestSummary(t *testing.T) {
	c := Choice{Kind: TPBTF, Refused: []Attempt{{Kind: Fentry, Err: syscall.EPERM}}}
	if got, want := c.Summary(), "tp_btf (refused: fentry: operation not permitted)"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
	if got := (Choice{Kind: Fentry}).Summary(); got != "fentry" {
		t.Errorf("Summary() = %q, want fentry", got)
	}
}

func kindsToStrings(ks []Kind) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = string(k)
	}
	return out
}
