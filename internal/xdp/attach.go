package xdp

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/probe"
)

// ErrForeignProgram is returned (wrapped, with the interface and the
// program named) when an interface already has an XDP program. tokenwire
// never replaces another program.
var ErrForeignProgram = errors.New("interface already has an XDP program")

// Attachment describes where one program instance is attached.
type Attachment struct {
	Interface string
	Ifindex   int
	// Mode is ModeNative or ModeGeneric.
	Mode string
	// Detached is set when the kernel detached the program by itself,
	// which happens when the interface is deleted.
	Detached bool
}

// instance is one loaded copy of the program with its own counters,
// attached to one interface (link is nil for unattached test instances).
type instance struct {
	iface    string
	ifindex  int
	mode     string
	prog     *ebpf.Program
	counters *ebpf.Map
	link     link.Link
}

// newInstance loads one copy of the program, sharing the blocklist maps,
// with counters of its own.
func (f *Filter) newInstance(iface string) (*instance, error) {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var objs struct {
		Prog     *ebpf.Program `ebpf:"tw_xdp_filter"`
		Counters *ebpf.Map     `ebpf:"tw_xdp_counters"`
	}
	err := f.spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		bpf.XdpFilterMapTwXdpBlock4: f.block4.outer,
		bpf.XdpFilterMapTwXdpBlock6: f.block6.outer,
		bpf.XdpFilterMapTwXdpAllow4: f.allow4.outer,
		bpf.XdpFilterMapTwXdpAllow6: f.allow6.outer,
	}, Cache: probe.KernelBTF()})
	if err != nil {
		return nil, fmt.Errorf("xdp: loading the program for %q: %w", iface, err)
	}
	inst := &instance{iface: iface, prog: objs.Prog, counters: objs.Counters}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		inst.close(f.log)
		return nil, ErrClosed
	}
	f.instances = append(f.instances, inst)
	return inst, nil
}

// attach loads an instance for the named interface and attaches it.
func (f *Filter) attach(name string) error {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("xdp: interface %q: %w", name, err)
	}
	if err := refuseOccupied(name, ifc.Index); err != nil {
		return err
	}
	inst, err := f.newInstance(name)
	if err != nil {
		return err
	}
	inst.ifindex = ifc.Index
	inst.link, inst.mode, err = attachLink(inst.prog, name, ifc.Index, f.cfg.Mode, f.log)
	if err != nil {
		return err
	}
	f.log.Info("XDP filter attached",
		zap.String("interface", name), zap.Int("ifindex", ifc.Index), zap.String("mode", inst.mode))
	return nil
}

// refuseOccupied returns an ErrForeignProgram error when the interface
// already has an XDP program in any mode.
func refuseOccupied(name string, ifindex int) error {
	progs, err := queryXDP(ifindex)
	if err != nil {
		return fmt.Errorf("xdp: checking interface %q for XDP programs: %w", name, err)
	}
	if len(progs) == 0 {
		return nil
	}
	p := progs[0]
	progName := "?"
	if prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(p.ID)); err == nil {
		if info, err := prog.Info(); err == nil {
			progName = info.Name
		}
		prog.Close()
	}
	if strings.HasPrefix(progName, bpf.XdpFilterProgTwXdpFilter) {
		return fmt.Errorf("%w: interface %q already has a tokenwire XDP filter (program id %d, %s mode), "+
			"probably from another collector on this host; refusing to attach a second one",
			ErrForeignProgram, name, p.ID, p.Mode)
	}
	return fmt.Errorf("%w: interface %q has an XDP program that tokenwire did not attach "+
		"(program id %d, name %q, %s mode); refusing to replace it: detach it first or leave %q out of xdp.interfaces",
		ErrForeignProgram, name, p.ID, progName, p.Mode, name)
}

// attachLink attaches prog to ifindex in the configured mode and returns
// the link and the mode used.
func attachLink(prog *ebpf.Program, name string, ifindex int, mode string, log *zap.Logger) (link.Link, string, error) {
	try := func(m string) (link.Link, error) {
		flags := link.XDPGenericMode
		if m == ModeNative {
			flags = link.XDPDriverMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
		if err != nil && (errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST)) {
			// Someone attached a program between our check and now.
			return nil, fmt.Errorf("%w: the kernel refused to attach to interface %q in %s mode because "+
				"another XDP program is attached: %v", ErrForeignProgram, name, m, err)
		}
		if err != nil {
			return nil, fmt.Errorf("xdp: attaching to interface %q in %s mode: %w", name, m, err)
		}
		return l, nil
	}
	if mode != ModeAuto {
		l, err := try(mode)
		return l, mode, err
	}
	l, err := try(ModeNative)
	if err == nil {
		return l, ModeNative, nil
	}
	if errors.Is(err, ErrForeignProgram) {
		return nil, "", err
	}
	log.Info("native XDP not available, trying generic mode", zap.String("interface", name), zap.Error(err))
	l, gerr := try(ModeGeneric)
	if gerr != nil {
		return nil, "", errors.Join(err, gerr)
	}
	return l, ModeGeneric, nil
}

func (inst *instance) close(log *zap.Logger) error {
	if inst.link != nil {
		// The link's interface may be gone (its link is then defunct):
		// nothing to restore, and nothing to fail Close for.
		if info, err := inst.link.Info(); err == nil {
			if x := info.XDP(); x != nil && x.Ifindex == 0 {
				log.Info("interface went away while the XDP filter was attached",
					zap.String("interface", inst.iface))
			}
		}
		if err := inst.link.Close(); err != nil {
			log.Warn("detaching the XDP filter", zap.String("interface", inst.iface), zap.Error(err))
		}
	}
	return errors.Join(inst.prog.Close(), inst.counters.Close())
}

// Attachments lists the interfaces the filter is attached to.
func (f *Filter) Attachments() []Attachment {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Attachment
	for _, inst := range f.instances {
		if inst.link == nil {
			continue
		}
		a := Attachment{Interface: inst.iface, Ifindex: inst.ifindex, Mode: inst.mode}
		if info, err := inst.link.Info(); err == nil {
			if x := info.XDP(); x != nil && x.Ifindex == 0 {
				a.Detached = true
			}
		}
		out = append(out, a)
	}
	return out
}
