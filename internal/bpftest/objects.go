package bpftest

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tokenwire/tokenwire/bpf"
)

// Objects is a snapshot of the BPF programs and maps that a test created:
// ones that did not exist at its Baseline and are named with
// bpf.ObjectPrefix, or .rodata maps (the loader names those after their ELF
// section). Comparing IDs keeps a tokenwire collector that runs on the same
// host out of the count.
type Objects struct {
	Programs []string
	Maps     []string
}

func (o Objects) String() string {
	return fmt.Sprintf("programs %v, maps %v", o.Programs, o.Maps)
}

// Empty reports whether the snapshot holds nothing of ours.
func (o Objects) Empty() bool { return len(o.Programs) == 0 && len(o.Maps) == 0 }

// Baseline remembers the IDs of the programs and maps that exist before a
// test, so that Ours reports only what the test created.
type Baseline struct {
	maps  map[ebpf.MapID]bool
	progs map[ebpf.ProgramID]bool
}

// NewBaseline records the programs and maps loaded right now.
func NewBaseline() (*Baseline, error) {
	b := &Baseline{maps: map[ebpf.MapID]bool{}, progs: map[ebpf.ProgramID]bool{}}
	err := eachMap(func(id ebpf.MapID, _ string) { b.maps[id] = true })
	eachProgram(func(id ebpf.ProgramID, _ string) { b.progs[id] = true })
	return b, err
}

// WaitGone polls Ours until it is empty or timeout passes, and returns the
// last snapshot. The kernel frees closed maps and programs asynchronously
// (after an RCU grace period), so a check right after Close can still see
// them for a few milliseconds.
func (b *Baseline) WaitGone(timeout time.Duration) (Objects, error) {
	deadline := time.Now().Add(timeout)
	for {
		o, err := b.Ours()
		if err != nil || o.Empty() || time.Now().After(deadline) {
			return o, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ours lists our programs and maps loaded now. It only reads IDs and
// names: it never touches, detaches or unpins anything.
func (b *Baseline) Ours() (Objects, error) {
	var o Objects
	err := eachMap(func(id ebpf.MapID, name string) {
		if !b.maps[id] && (strings.HasPrefix(name, bpf.ObjectPrefix) || name == ".rodata") {
			o.Maps = append(o.Maps, name)
		}
	})
	if err != nil {
		return o, err
	}
	eachProgram(func(id ebpf.ProgramID, name string) {
		if !b.progs[id] && strings.HasPrefix(name, bpf.ObjectPrefix) {
			o.Programs = append(o.Programs, name)
		}
	})
	slices.Sort(o.Programs)
	slices.Sort(o.Maps)
	return o, nil
}

func eachProgram(fn func(ebpf.ProgramID, string)) {
	var id ebpf.ProgramID
	for {
		var err error
		if id, err = ebpf.ProgramGetNextID(id); err != nil {
			return // ErrNotExist: no more programs
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		info, err := p.Info()
		p.Close()
		if err == nil {
			fn(id, info.Name)
		}
	}
}

func eachMap(fn func(ebpf.MapID, string)) error {
	var id ebpf.MapID
	for {
		var err error
		if id, err = ebpf.MapGetNextID(id); err != nil {
			return nil
		}
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		info, err := m.Info()
		m.Close()
		if err == nil {
			fn(id, info.Name)
		}
	}
}
