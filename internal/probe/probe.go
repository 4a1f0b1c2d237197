// Package probe loads one program of a BPF collection against maps that
// are already loaded, and attaches it with the first hook type the kernel
// accepts.
//
// Each capability ships the same handler behind several hook types (one
// program each). Loading them one at a time matters: a kernel that refuses
// one program type (fentry returns EPERM on some) must not stop the others
// from loading, so the collection is never loaded whole.
package probe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/hook"
)

// AttachFunc attaches a loaded program.
type AttachFunc func(*ebpf.Program) (link.Link, error)

// Variant is one program of a hook point and how to attach it.
type Variant struct {
	Kind    hook.Kind
	Program string // program name in the collection
	Attach  AttachFunc
}

// Tracing attaches fentry, fexit and tp_btf programs (the target is in the
// program's section name).
func Tracing() AttachFunc {
	return func(p *ebpf.Program) (link.Link, error) {
		return link.AttachTracing(link.TracingOptions{Program: p})
	}
}

// RawTracepoint attaches to the raw tracepoint name.
func RawTracepoint(name string) AttachFunc {
	return func(p *ebpf.Program) (link.Link, error) {
		return link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: p})
	}
}

// Tracepoint attaches to the classic tracepoint group:name (needs tracefs).
func Tracepoint(group, name string) AttachFunc {
	return func(p *ebpf.Program) (link.Link, error) {
		return link.Tracepoint(group, name, p, nil)
	}
}

// Kprobe attaches to the entry of the kernel function symbol.
func Kprobe(symbol string) AttachFunc {
	return func(p *ebpf.Program) (link.Link, error) {
		return link.Kprobe(symbol, p, nil)
	}
}

// Choose attaches the first variant, in order, that loads and attaches.
// maps replaces every map the programs use, so all variants share state.
func Choose(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map, order []hook.Kind, variants []Variant) (hook.Choice, error) {
	attaches := make(map[hook.Kind]hook.Attach, len(variants))
	for _, v := range variants {
		attaches[v.Kind] = func() (io.Closer, error) {
			return LoadAndAttach(spec, maps, v.Program, v.Attach)
		}
	}
	return hook.Choose(order, attaches)
}

// Attached is a loaded program and its link; Close detaches, then unloads.
type Attached struct {
	Program *ebpf.Program
	Link    link.Link
}

// Close detaches and unloads.
func (a *Attached) Close() error {
	return errors.Join(a.Link.Close(), a.Program.Close())
}

// LoadAndAttach loads the program named progName from spec, with maps
// replacing the collection's maps, and attaches it.
func LoadAndAttach(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map, progName string, attach AttachFunc) (*Attached, error) {
	ps, ok := spec.Programs[progName]
	if !ok {
		return nil, fmt.Errorf("no program %q in the collection", progName)
	}
	one := spec.Copy()
	one.Programs = map[string]*ebpf.ProgramSpec{"prog": ps.Copy()}
	var objs struct {
		Prog *ebpf.Program `ebpf:"prog"`
	}
	if err := one.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: maps}); err != nil {
		if errors.Is(err, unix.EPERM) {
			// cilium/ebpf suggests raising RLIMIT_MEMLOCK on any EPERM; the
			// receiver already has, so the kernel refuses this program type
			// (fentry under lockdown or without trampoline support).
			return nil, fmt.Errorf("load: the kernel refused %s: %w", progName, unix.EPERM)
		}
		return nil, fmt.Errorf("load: %w", err)
	}
	l, err := attach(objs.Prog)
	if err != nil {
		objs.Prog.Close()
		return nil, fmt.Errorf("attach: %w", err)
	}
	return &Attached{Program: objs.Prog, Link: l}, nil
}

// SumPerCPU adds up the per-CPU values of a BPF_MAP_TYPE_PERCPU_ARRAY of
// uint64 counters at idx.
func SumPerCPU(m *ebpf.Map, idx uint32) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(idx, &perCPU); err != nil {
		return 0, fmt.Errorf("reading counter %d of %s: %w", idx, m, err)
	}
	var sum uint64
	for _, v := range perCPU {
		sum += v
	}
	return sum, nil
}

// CountEntries counts the entries of a hash map keyed by uint64.
func CountEntries(m *ebpf.Map) (int, error) {
	var (
		key uint64
		val = make([]byte, m.ValueSize())
		n   int
	)
	it := m.Iterate()
	for it.Next(&key, &val) {
		n++
	}
	return n, it.Err()
}

// PollInterval is how often a ring-buffer reader looks for records that
// were submitted without a wake-up (see bpf/ringbuf.h): the longest a
// record waits in a quiet ring.
const PollInterval = 100 * time.Millisecond

// WakeupBytes is the backlog at which the kernel wakes the reader at once:
// a quarter of the ring, so bursts never fill it between polls.
func WakeupBytes(ringBytes uint32) uint64 { return uint64(ringBytes / 4) }

// ReadRing reads the next record from r into rec, waking every
// PollInterval to drain records that came without a wake-up. It returns
// ringbuf.ErrClosed (wrapped) once r is closed.
func ReadRing(r *ringbuf.Reader, rec *ringbuf.Record) error {
	for {
		r.SetDeadline(time.Now().Add(PollInterval))
		err := r.ReadInto(rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue // nothing waiting; look again
		}
		return err
	}
}
