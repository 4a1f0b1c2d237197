package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/probe"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// hookOf is the kernel hook a tokenwire or bench program runs on, from its
// name (tw_st_sent_btf, tw_hs_btf, tw_fl_sent, tw_pt_3_tail, ...); "" for a
// program the floor has no empty counterpart for.
func hookOf(name string) string {
	switch {
	case strings.HasPrefix(name, "tw_st_sent"), name == "tw_fl_sent", strings.HasPrefix(name, "tw_pt_"):
		return "sock_send_length"
	case strings.HasPrefix(name, "tw_st_ready"), name == "tw_fl_ready":
		return "sk_data_ready"
	case strings.HasPrefix(name, "tw_st_recv"), name == "tw_fl_recv":
		return "sock_recv_length"
	case strings.HasPrefix(name, "tw_st_state"), strings.HasPrefix(name, "tw_hs_"), name == "tw_fl_state":
		return "inet_sock_set_state"
	}
	return ""
}

// benchProgs are bench-only programs, attached (tp_btf, as the
// collector's programs are on this kernel): the empty programs of
// floor.bpf.c, or the write program's parts of parts.bpf.c.
type benchProgs struct {
	objs  io.Closer
	progs []*ebpf.Program
	links []link.Link
}

func attachFloor() (*benchProgs, error) {
	var objs floorObjects
	if err := loadFloorObjects(&objs, nil); err != nil {
		return nil, err
	}
	return attachAll(&objs, objs.TwFlReady, objs.TwFlRecv, objs.TwFlSent, objs.TwFlState)
}

// attachPart attaches the program of a step of the write program alone,
// watching port, loaded as the step says (benchutil.WriteStep).
func attachPart(st benchutil.WriteStep, port uint16) (*benchProgs, error) {
	spec, err := loadParts()
	if err != nil {
		return nil, err
	}
	prog := st.Prog
	if err := spec.Variables["port"].Set(port); err != nil {
		return nil, err
	}
	byCast := !st.RegsByHelper && stream.RegsByCast()
	if err := spec.Variables["regs_by_cast"].Set(byCast); err != nil {
		return nil, err
	}
	// The kernel's copy of a write's bytes, where the receiver finds it.
	base, _ := stream.DirectMapBase()
	if err := spec.Variables["frag_va_base"].Set(base); err != nil {
		return nil, err
	}
	if !st.KeepRodata {
		if _, err := probe.InlineReadOnly(spec); err != nil {
			return nil, err
		}
	}
	for name := range spec.Programs {
		if name != prog {
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, err
	}
	if prog == "tw_pt_0b_nested" {
		if err := fillNested(coll.Maps["tw_pt_nested"], spec.Maps["tw_pt_nested"].InnerMap); err != nil {
			coll.Close()
			return nil, err
		}
	}
	return attachAll(collCloser{coll}, coll.Programs[prog])
}

// fillNested gives every entry of the parts' array of slot arrays an
// array of its own; the outer array holds them after their fds close.
func fillNested(outer *ebpf.Map, inner *ebpf.MapSpec) error {
	for i := uint32(0); i < outer.MaxEntries(); i++ {
		m, err := ebpf.NewMap(inner)
		if err != nil {
			return fmt.Errorf("tw_pt_nested[%d]: %w", i, err)
		}
		err = outer.Put(i, m)
		m.Close()
		if err != nil {
			return fmt.Errorf("tw_pt_nested[%d]: %w", i, err)
		}
	}
	return nil
}

type collCloser struct{ *ebpf.Collection }

func (c collCloser) Close() error { c.Collection.Close(); return nil }

func attachAll(objs io.Closer, progs ...*ebpf.Program) (*benchProgs, error) {
	b := &benchProgs{objs: objs, progs: progs}
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			b.close()
			return nil, err
		}
		b.links = append(b.links, l)
	}
	return b, nil
}

// stats are the programs' counters, identified by their IDs.
func (b *benchProgs) stats() ([]benchutil.ProgStat, error) {
	var out []benchutil.ProgStat
	for _, p := range b.progs {
		info, err := p.Info()
		if err != nil {
			return nil, err
		}
		id, _ := info.ID()
		s, err := p.Stats()
		if err != nil {
			return nil, err
		}
		out = append(out, benchutil.ProgStat{ID: uint32(id), Name: info.Name, RunNs: uint64(s.Runtime), RunCnt: s.RunCount})
	}
	return out, nil
}

func (b *benchProgs) close() {
	for _, l := range b.links {
		l.Close()
	}
	b.objs.Close()
}
