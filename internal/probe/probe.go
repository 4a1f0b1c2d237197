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
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/hook"
)

// AttachFunc attaches a loaded program.
type AttachFunc func(*ebpf.Program) (link.Link, error)

// Part is one program of a variant and how to attach it.
type Part struct {
	Program string // program name in the collection
	Attach  AttachFunc
}

// Variant is how a hook point attaches with one hook type: usually one
// program, two for a kprobe whose return is needed too (the entry
// remembers the arguments for the kretprobe).
type Variant struct {
	Kind  hook.Kind
	Parts []Part
	// Check, when set, runs before loading: an error says why this kernel
	// cannot have the variant, in words clearer than the loader's, and
	// Choose reports it as the refusal.
	Check func() error
}

// One is a variant of a single program.
func One(kind hook.Kind, program string, attach AttachFunc) Variant {
	return Variant{Kind: kind, Parts: []Part{{program, attach}}}
}

// Tracepoints are the three tracepoint variants of a hook point: tp_btf,
// raw_tracepoint and classic tracepoint programs named prefix+"_btf",
// "_raw" and "_tp", on the tracepoint group:name.
func Tracepoints(prefix, group, name string) []Variant {
	exists := func() error { return tracepointExists(group, name) }
	return []Variant{
		{Kind: hook.TPBTF, Parts: []Part{{prefix + "_btf", Tracing()}}, Check: exists},
		{Kind: hook.RawTracepoint, Parts: []Part{{prefix + "_raw", RawTracepoint(name)}}, Check: exists},
		{Kind: hook.Tracepoint, Parts: []Part{{prefix + "_tp", Tracepoint(group, name)}}, Check: exists},
	}
}

// tracepointExists looks for the tracepoint's type in the kernel's BTF.
// Only a definite absence is an error: where the BTF cannot be read, the
// loader says what is wrong.
func tracepointExists(group, name string) error {
	if _, err := KernelType[*btf.Typedef]("btf_trace_" + name); errors.Is(err, btf.ErrNotFound) {
		return fmt.Errorf("this kernel has no tracepoint %s:%s", group, name)
	}
	return nil
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

// kretprobeMaxActive is how many calls of one function a kretprobe follows
// at once. The kernel's default (about twice the CPUs) misses the returns
// of calls beyond it, such as reads blocked on idle connections.
const kretprobeMaxActive = 4096

// Kretprobe attaches to the return of the kernel function symbol. It asks
// for kretprobeMaxActive instances, which needs tracefs; without it the
// kernel's default applies.
func Kretprobe(symbol string) AttachFunc {
	return func(p *ebpf.Program) (link.Link, error) {
		l, err := link.Kretprobe(symbol, p, &link.KprobeOptions{
			RetprobeMaxActive: kretprobeMaxActive, TraceFSPrefix: "tokenwire"})
		if err == nil {
			return l, nil
		}
		return link.Kretprobe(symbol, p, nil)
	}
}

// Choose attaches the first variant, in order, that loads and attaches.
// maps replaces every map the programs use, so all variants share state.
func Choose(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map, order []hook.Kind, variants []Variant) (hook.Choice, error) {
	attaches := make(map[hook.Kind]hook.Attach, len(variants))
	for _, v := range variants {
		attaches[v.Kind] = func() (io.Closer, error) {
			if v.Check != nil {
				if err := v.Check(); err != nil {
					return nil, err
				}
			}
			return LoadAndAttach(spec, maps, v.Parts)
		}
	}
	return hook.Choose(order, attaches)
}

// Attached is the loaded programs of a variant and their links; Close
// detaches, then unloads.
type Attached struct {
	Programs []*ebpf.Program
	Links    []link.Link
}

// Close detaches and unloads, last attached first.
func (a *Attached) Close() error {
	var errs []error
	for i := len(a.Links) - 1; i >= 0; i-- {
		errs = append(errs, a.Links[i].Close())
	}
	for _, p := range a.Programs {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// LoadAndAttach loads and attaches each part in turn, every program from
// spec with maps replacing the collection's maps. On error nothing stays
// attached or loaded.
func LoadAndAttach(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map, parts []Part) (*Attached, error) {
	a := &Attached{}
	for _, part := range parts {
		prog, err := load(spec, maps, part.Program)
		if err != nil {
			a.Close()
			return nil, err
		}
		a.Programs = append(a.Programs, prog)
		l, err := part.Attach(prog)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("attach %s: %w", part.Program, err)
		}
		a.Links = append(a.Links, l)
	}
	return a, nil
}

// load loads the program named progName from spec, alone, with maps
// replacing the collection's maps and the values of its read-only globals
// inlined (InlineReadOnly): set them all before. Inlining here, one
// program at a time, analyses only the programs a probe loads, not every
// hook type's variant in the collection.
func load(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map, progName string) (*ebpf.Program, error) {
	ps, ok := spec.Programs[progName]
	if !ok {
		return nil, fmt.Errorf("no program %q in the collection", progName)
	}
	one := spec.Copy()
	one.Programs = map[string]*ebpf.ProgramSpec{"prog": ps.Copy()}
	if _, err := InlineReadOnly(one); err != nil {
		return nil, fmt.Errorf("inline %s: %w", progName, err)
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"prog"`
	}
	if err := one.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: maps, Cache: KernelBTF()}); err != nil {
		if errors.Is(err, unix.EPERM) {
			// cilium/ebpf suggests raising RLIMIT_MEMLOCK on any EPERM; the
			// receiver already has, so the kernel refuses this program type
			// (fentry under lockdown or without trampoline support).
			return nil, fmt.Errorf("load: the kernel refused %s: %w", progName, unix.EPERM)
		}
		return nil, fmt.Errorf("load %s: %w", progName, err)
	}
	return objs.Prog, nil
}

// Endpoints decodes a record's connection endpoints (struct tw_endpoints).
func Endpoints(family uint16, saddr, daddr *[16]uint8, sport, dport uint16) (local, remote netip.AddrPort) {
	return netip.AddrPortFrom(addr(family, saddr), sport), netip.AddrPortFrom(addr(family, daddr), dport)
}

func addr(family uint16, b *[16]uint8) netip.Addr {
	switch family {
	case unix.AF_INET:
		return netip.AddrFrom4([4]byte(b[:4]))
	case unix.AF_INET6:
		return netip.AddrFrom16(*b)
	}
	return netip.Addr{}
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

// WatchPorts puts each of ports into m, a probe's set of watched server
// ports (key: the port as a u32, value: 1).
func WatchPorts(m *ebpf.Map, ports []uint16) error {
	for _, p := range ports {
		if err := m.Put(uint32(p), uint8(1)); err != nil {
			return fmt.Errorf("setting watched port %d: %w", p, err)
		}
	}
	return nil
}

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
