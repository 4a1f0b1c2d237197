package xdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bpf"
)

// ErrForeignProgram is returned (wrapped, with the interface and the
// program named) when an interface already has an XDP program. tokenwire
// never replaces another program.
var ErrForeignProgram = errors.New("interface already has an XDP program")

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("xdp filter closed")

// Action is what the filter did with a frame.
type Action uint32

// Actions (the kernel's XDP_DROP and XDP_PASS).
const (
	ActionDrop = Action(bpf.XDPActionDrop)
	ActionPass = Action(bpf.XDPActionPass)
)

// String returns the action as the tokenwire.xdp.action attribute spells
// it: "pass" or "drop".
func (a Action) String() string {
	switch a {
	case ActionDrop:
		return "drop"
	case ActionPass:
		return "pass"
	}
	return fmt.Sprintf("action(%d)", uint32(a))
}

// Reason is why the filter did it.
type Reason uint32

// Reasons.
const (
	ReasonNone      = Reason(bpf.XDPReasonNone)
	ReasonBlocklist = Reason(bpf.XDPReasonBlocklist)
	ReasonMalformed = Reason(bpf.XDPReasonMalformed)
)

// String returns the reason as the tokenwire.xdp.reason attribute spells
// it: "none", "blocklist" or "malformed".
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonBlocklist:
		return "blocklist"
	case ReasonMalformed:
		return "malformed"
	}
	return fmt.Sprintf("reason(%d)", uint32(r))
}

// verdicts are the (action, reason) pairs the program produces; Counters
// reports each of them for every interface, zero or not, so that a metric
// exists from the start.
var verdicts = [...]struct {
	Action
	Reason
}{
	{ActionPass, ReasonNone},
	{ActionDrop, ReasonBlocklist},
	{ActionDrop, ReasonMalformed},
}

// counterSlot is the counter array index of (action, reason); the same
// formula as in tokenwire.h (enum tw_xdp_counter_slot).
func counterSlot(a Action, r Reason) uint32 {
	return uint32(a)*bpf.XDPReasonMax + uint32(r)
}

// Counter is the total of one (interface, action, reason) since Open,
// summed over CPUs.
type Counter struct {
	Interface string
	Action    Action
	Reason    Reason
	Packets   uint64
	// Bytes counts whole frames from the Ethernet header on, without FCS.
	Bytes uint64
}

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

// Stats describe the blocklist in force and its reloads.
type Stats struct {
	// Entries4 and Entries6 count the distinct prefixes in force.
	Entries4, Entries6 int
	// Reloads counts successful reloads since Open.
	Reloads uint64
	// ReloadErrors counts reloads that failed; each left the previous
	// blocklist in force.
	ReloadErrors uint64
}

// Filter is the XDP filter attached to a set of interfaces.
type Filter struct {
	cfg    Config
	log    *zap.Logger
	spec   *ebpf.CollectionSpec
	static []netip.Prefix // from Config.Blocklist

	// block4 and block6 are the one-slot arrays of maps the programs read
	// the current tries from.
	block4, block6 *ebpf.Map

	// reloadMu serializes reloads (and Close against them); building a
	// trie can take a while, and Counters must not wait for it.
	reloadMu sync.Mutex

	mu         sync.Mutex // guards the fields below
	closed     bool
	lpm4, lpm6 *ebpf.Map      // tries in force (our fds)
	cur4, cur6 []netip.Prefix // their contents, sorted
	reloads    uint64
	reloadErrs uint64
	instances  []*instance

	watchStop func()
	watchDone chan struct{}

	closeOnce sync.Once
	closeErr  error
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

// Open loads the filter, fills the blocklist and attaches one program
// instance to each interface of cfg, in the calling thread's network
// namespace. On error nothing stays attached or loaded.
func Open(cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("xdp config: %w", err)
	}
	cfg = cfg.withDefaults()

	f, err := newFilter(cfg)
	if err != nil {
		return nil, err
	}
	var stamp fileStamp
	if cfg.BlocklistFile != "" {
		// Stamp before reading: a change made while we read is seen by
		// the watcher's first poll.
		stamp = statFile(cfg.BlocklistFile)
		if err := f.loadFile(); err != nil {
			f.Close()
			return nil, err
		}
	}
	for _, name := range cfg.Interfaces {
		if err := f.attach(name); err != nil {
			f.Close()
			return nil, err
		}
	}
	if cfg.BlocklistFile != "" && cfg.WatchInterval > 0 {
		f.startWatch(stamp)
	}
	return f, nil
}

// newFilter loads the blocklist maps and fills them from cfg.Blocklist. It
// attaches nothing.
func newFilter(cfg Config) (*Filter, error) {
	cfg = cfg.withDefaults()
	static, err := ParseCIDRs(cfg.Blocklist)
	if err != nil {
		return nil, fmt.Errorf("xdp config: %w", err)
	}
	spec, err := bpf.LoadXdpFilter()
	if err != nil {
		return nil, err
	}
	// The tries are created here, but the outer maps' inner-map template
	// should describe them too.
	spec.Maps[bpf.XdpFilterMapTwXdpBlock4].InnerMap.MaxEntries = cfg.Capacity4
	spec.Maps[bpf.XdpFilterMapTwXdpBlock6].InnerMap.MaxEntries = cfg.Capacity6

	f := &Filter{cfg: cfg, log: cfg.Logger, spec: spec, static: static}
	var outer struct {
		Block4 *ebpf.Map `ebpf:"tw_xdp_block4"`
		Block6 *ebpf.Map `ebpf:"tw_xdp_block6"`
	}
	if err := spec.LoadAndAssign(&outer, nil); err != nil {
		return nil, fmt.Errorf("xdp: loading blocklist maps: %w", err)
	}
	f.block4, f.block6 = outer.Block4, outer.Block6
	f.reloadMu.Lock()
	err = f.reloadLocked(static)
	f.reloadMu.Unlock()
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
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
		bpf.XdpFilterMapTwXdpBlock4: f.block4,
		bpf.XdpFilterMapTwXdpBlock6: f.block6,
	}})
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

// Counters returns packets and bytes per interface and verdict since Open,
// summed over CPUs. Every verdict of every interface is listed, zeros too.
func (f *Filter) Counters() ([]Counter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	var out []Counter
	for _, inst := range f.instances {
		slots, err := inst.read()
		if err != nil {
			return nil, fmt.Errorf("xdp: reading counters of %q: %w", inst.iface, err)
		}
		for _, v := range verdicts {
			s := slots[counterSlot(v.Action, v.Reason)]
			out = append(out, Counter{Interface: inst.iface, Action: v.Action, Reason: v.Reason,
				Packets: s.Packets, Bytes: s.Bytes})
		}
	}
	return out, nil
}

// read sums every counter slot of the instance over CPUs.
func (inst *instance) read() ([bpf.XDPCounterSlots]bpf.XDPCounterValue, error) {
	var (
		out    [bpf.XDPCounterSlots]bpf.XDPCounterValue
		perCPU []bpf.XDPCounterValue
	)
	for slot := range bpf.XDPCounterSlots {
		if err := inst.counters.Lookup(slot, &perCPU); err != nil {
			return out, err
		}
		for _, v := range perCPU {
			out[slot].Packets += v.Packets
			out[slot].Bytes += v.Bytes
		}
	}
	return out, nil
}

// Stats reports the blocklist in force and how its reloads went.
func (f *Filter) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{Entries4: len(f.cur4), Entries6: len(f.cur6), Reloads: f.reloads, ReloadErrors: f.reloadErrs}
}

// Reload replaces the whole blocklist with prefixes (config entries
// included: pass them again to keep them). It builds new tries and swaps
// them in; when it returns nil, every packet the programs see from then on
// is checked against the new list, and no program still reads the old
// one. On error the old list stays in force.
func (f *Filter) Reload(prefixes []netip.Prefix) error {
	f.reloadMu.Lock()
	defer f.reloadMu.Unlock()
	err := f.reloadLocked(prefixes)
	f.mu.Lock()
	if err != nil {
		f.reloadErrs++
	} else {
		f.reloads++
	}
	f.mu.Unlock()
	return err
}

// reloadLocked does Reload's work; the caller holds reloadMu.
func (f *Filter) reloadLocked(prefixes []netip.Prefix) error {
	f.mu.Lock()
	closed, cur4, cur6 := f.closed, f.cur4, f.cur6
	f.mu.Unlock()
	if closed {
		return ErrClosed
	}

	v4, v6 := normalize(prefixes)
	if len(v4) > int(f.cfg.Capacity4) {
		return fmt.Errorf("xdp: the blocklist has %d IPv4 prefixes, more than the capacity of %d", len(v4), f.cfg.Capacity4)
	}
	if len(v6) > int(f.cfg.Capacity6) {
		return fmt.Errorf("xdp: the blocklist has %d IPv6 prefixes, more than the capacity of %d", len(v6), f.cfg.Capacity6)
	}

	// Build whatever changed, off to the side.
	var new4, new6 *ebpf.Map
	closeNew := func() {
		if new4 != nil {
			new4.Close()
		}
		if new6 != nil {
			new6.Close()
		}
	}
	var err error
	if f.lpm4 == nil || !slices.Equal(v4, cur4) {
		if new4, err = f.newTrie4(v4); err != nil {
			return err
		}
	}
	if f.lpm6 == nil || !slices.Equal(v6, cur6) {
		if new6, err = f.newTrie6(v6); err != nil {
			closeNew()
			return err
		}
	}

	// Swap. Each update returns only after running programs finished
	// (the kernel's synchronize_rcu for map-in-map updates).
	if new4 != nil {
		if err := f.block4.Put(uint32(0), new4); err != nil {
			closeNew()
			return fmt.Errorf("xdp: installing the IPv4 blocklist: %w", err)
		}
	}
	if new6 != nil {
		if err := f.block6.Put(uint32(0), new6); err != nil {
			// Put the old IPv4 trie back: one list in force, not half of two.
			if new4 != nil && f.lpm4 != nil {
				if rerr := f.block4.Put(uint32(0), f.lpm4); rerr != nil {
					err = errors.Join(err, fmt.Errorf("restoring the IPv4 blocklist: %w", rerr))
				}
			}
			closeNew()
			return fmt.Errorf("xdp: installing the IPv6 blocklist: %w", err)
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	// The outer map holds its own reference to the trie in force; ours to
	// a replaced trie can go, and the kernel frees it.
	if new4 != nil {
		if f.lpm4 != nil {
			f.lpm4.Close()
		}
		f.lpm4, f.cur4 = new4, v4
	}
	if new6 != nil {
		if f.lpm6 != nil {
			f.lpm6.Close()
		}
		f.lpm6, f.cur6 = new6, v6
	}
	return nil
}

// normalize splits prefixes by family, masks them and drops duplicates;
// the results are sorted.
func normalize(prefixes []netip.Prefix) (v4, v6 []netip.Prefix) {
	for _, p := range prefixes {
		if !p.IsValid() {
			continue
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	cmp := func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	}
	slices.SortFunc(v4, cmp)
	slices.SortFunc(v6, cmp)
	return slices.Compact(v4), slices.Compact(v6)
}

func (f *Filter) newTrie4(prefixes []netip.Prefix) (*ebpf.Map, error) {
	keys := make([]bpf.XDPLPM4Key, len(prefixes))
	for i, p := range prefixes {
		keys[i] = bpf.XDPLPM4Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As4()}
	}
	return f.newTrie(bpf.XdpFilterMapTwXdpBlock4, "tw_xdp_lpm4", f.cfg.Capacity4,
		func(m *ebpf.Map) error { return fillKeys(m, keys) })
}

func (f *Filter) newTrie6(prefixes []netip.Prefix) (*ebpf.Map, error) {
	keys := make([]bpf.XDPLPM6Key, len(prefixes))
	for i, p := range prefixes {
		keys[i] = bpf.XDPLPM6Key{Prefixlen: uint32(p.Bits()), Addr: p.Addr().As16()}
	}
	return f.newTrie(bpf.XdpFilterMapTwXdpBlock6, "tw_xdp_lpm6", f.cfg.Capacity6,
		func(m *ebpf.Map) error { return fillKeys(m, keys) })
}

// newTrie creates an LPM trie like the inner-map template of outer and
// fills it.
func (f *Filter) newTrie(outer, name string, capacity uint32, fill func(*ebpf.Map) error) (*ebpf.Map, error) {
	spec := f.spec.Maps[outer].InnerMap.Copy()
	spec.Name = name
	spec.MaxEntries = capacity
	m, err := ebpf.NewMap(spec)
	if err != nil {
		return nil, fmt.Errorf("xdp: creating blocklist trie %s: %w", name, err)
	}
	if err := fill(m); err != nil {
		m.Close()
		return nil, fmt.Errorf("xdp: filling blocklist trie %s: %w", name, err)
	}
	return m, nil
}

// fillKeys puts every key with the value 1 (the value is not read: a
// match is what blocks), in batches where the kernel supports batch
// updates of LPM tries and one syscall per key where it does not.
func fillKeys[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	values := make([]uint8, len(keys))
	for i := range values {
		values[i] = 1
	}
	n, err := m.BatchUpdate(keys, values, nil)
	if err == nil {
		if n != len(keys) {
			return fmt.Errorf("batch update stored %d of %d entries", n, len(keys))
		}
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Put(&keys[i], values[i]); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the file watcher, detaches every program (restoring the
// interfaces to no XDP program) and frees every map. It may be called more
// than once.
func (f *Filter) Close() error {
	f.closeOnce.Do(func() {
		if f.watchStop != nil {
			f.watchStop()
			<-f.watchDone
		}
		f.reloadMu.Lock()
		defer f.reloadMu.Unlock()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.closed = true
		var errs []error
		for _, inst := range f.instances {
			errs = append(errs, inst.close(f.log))
		}
		f.instances = nil
		for _, m := range []*ebpf.Map{f.block4, f.block6, f.lpm4, f.lpm6} {
			if m != nil {
				errs = append(errs, m.Close())
			}
		}
		f.closeErr = errors.Join(errs...)
	})
	return f.closeErr
}
