package main

import (
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// hookOf is the kernel hook a tokenwire program runs on, from its name
// (tw_st_sent_btf, tw_hs_btf, ...); "" for a program the floor has no
// empty counterpart for.
func hookOf(name string) string {
	switch {
	case strings.HasPrefix(name, "tw_st_sent"), name == "tw_fl_sent":
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

// floor is the empty programs, attached (tp_btf, as the collector's
// programs are on this kernel).
type floor struct {
	objs  floorObjects
	progs []*ebpf.Program
	links []link.Link
}

func attachFloor() (*floor, error) {
	f := &floor{}
	if err := loadFloorObjects(&f.objs, nil); err != nil {
		return nil, err
	}
	f.progs = []*ebpf.Program{f.objs.TwFlReady, f.objs.TwFlRecv, f.objs.TwFlSent, f.objs.TwFlState}
	for _, p := range f.progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			f.close()
			return nil, err
		}
		f.links = append(f.links, l)
	}
	return f, nil
}

// stats are the floor programs' counters, identified by their IDs.
func (f *floor) stats() ([]benchutil.ProgStat, error) {
	var out []benchutil.ProgStat
	for _, p := range f.progs {
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

func (f *floor) close() {
	for _, l := range f.links {
		l.Close()
	}
	f.objs.Close()
}
