package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"go.uber.org/zap"

	"github.com/tokenwire/tokenwire/bpf"
)

// ErrClosed is returned by methods called after Close.
var ErrClosed = errors.New("xdp filter closed")

// Stats describe the lists in force and the blocklist's reloads.
type Stats struct {
	// Entries4 and Entries6 count the distinct blocklist prefixes in force.
	Entries4, Entries6 int
	// Allow4 and Allow6 count the distinct allowlist prefixes.
	Allow4, Allow6 int
	// Reloads counts successful reloads since Open.
	Reloads uint64
	// ReloadErrors counts reloads that were refused; each left the
	// previous blocklist in force. ReloadErrorsByReason splits it (every
	// reason of FailureReasons is present, zero or not).
	ReloadErrors         uint64
	ReloadErrorsByReason map[FailureReason]uint64
}

// Filter is the XDP filter attached to a set of interfaces.
type Filter struct {
	cfg    Config
	log    *zap.Logger
	spec   *ebpf.CollectionSpec
	policy prefixPolicy
	static []netip.Prefix // from Config.Blocklist

	// The tables the programs read, through one-slot arrays of maps.
	block4, block6, allow4, allow6 *tableSlot

	// reloadMu serializes reloads (and Close against them); building a
	// table can take a while, and Counters must not wait for it.
	reloadMu sync.Mutex

	mu         sync.Mutex // guards the fields below
	closed     bool
	cur4, cur6 []netip.Prefix // blocklist in force, sorted
	nAllow     [2]int         // allowlist sizes (IPv4, IPv6)
	reloads    uint64
	reloadErrs map[FailureReason]uint64
	// file is the version of the blocklist file last decided on:
	// applied, or refused (and counted once).
	file      fileVersion
	instances []*instance

	watchStop func()
	watchDone chan struct{}

	closeOnce sync.Once
	closeErr  error
}

// Open loads the filter, fills the lists and attaches one program
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
	if cfg.BlocklistFile != "" {
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
		f.startWatch()
	}
	return f, nil
}

// newFilter loads the table maps, fills the allowlist and the blocklist
// of cfg.Blocklist. It attaches nothing and does not read BlocklistFile.
func newFilter(cfg Config) (*Filter, error) {
	cfg = cfg.withDefaults()
	pol := cfg.policy()
	static, err := parseEntries("blocklist", cfg.Blocklist, pol.checkEntry)
	if err != nil {
		return nil, fmt.Errorf("xdp config: %w", err)
	}
	allow, err := parseEntries("allowlist", cfg.Allowlist, nil)
	if err != nil {
		return nil, fmt.Errorf("xdp config: %w", err)
	}
	a4, a6 := normalize(allow)
	spec, err := bpf.LoadXdpFilter()
	if err != nil {
		return nil, err
	}
	for name, used := range map[string]bool{
		bpf.XdpFilterVarTwXdpAllow4Used: len(a4) > 0,
		bpf.XdpFilterVarTwXdpAllow6Used: len(a6) > 0,
	} {
		var v uint8
		if used {
			v = 1
		}
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("xdp: %s: %w", name, err)
		}
	}
	f := &Filter{
		cfg: cfg, log: cfg.Logger, spec: spec, policy: pol, static: static,
		block4:     newSlot(spec, bpf.XdpFilterMapTwXdpBlock4, "tw_xdp_bl4", false, cfg.Capacity4),
		block6:     newSlot(spec, bpf.XdpFilterMapTwXdpBlock6, "tw_xdp_bl6", true, cfg.Capacity6),
		allow4:     newSlot(spec, bpf.XdpFilterMapTwXdpAllow4, "tw_xdp_al4", false, uint32(len(a4))),
		allow6:     newSlot(spec, bpf.XdpFilterMapTwXdpAllow6, "tw_xdp_al6", true, uint32(len(a6))),
		nAllow:     [2]int{len(a4), len(a6)},
		reloadErrs: map[FailureReason]uint64{},
	}
	var outer struct {
		Block4 *ebpf.Map `ebpf:"tw_xdp_block4"`
		Block6 *ebpf.Map `ebpf:"tw_xdp_block6"`
		Allow4 *ebpf.Map `ebpf:"tw_xdp_allow4"`
		Allow6 *ebpf.Map `ebpf:"tw_xdp_allow6"`
	}
	if err := spec.LoadAndAssign(&outer, nil); err != nil {
		return nil, fmt.Errorf("xdp: loading the table maps: %w", err)
	}
	f.block4.outer, f.block6.outer = outer.Block4, outer.Block6
	f.allow4.outer, f.allow6.outer = outer.Allow4, outer.Allow6

	// The allowlist is installed once, before any program can run.
	for _, a := range []struct {
		slot     *tableSlot
		prefixes []netip.Prefix
	}{{f.allow4, a4}, {f.allow6, a6}} {
		m, err := a.slot.build(a.prefixes)
		if err == nil {
			_, err = a.slot.swap(m)
			if err != nil {
				m.Close()
			}
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("xdp: allowlist: %w", err)
		}
	}
	f.reloadMu.Lock()
	err = f.reloadLocked(static)
	f.reloadMu.Unlock()
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Stats reports the lists in force and how the blocklist's reloads went.
func (f *Filter) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Stats{
		Entries4: len(f.cur4), Entries6: len(f.cur6), Allow4: f.nAllow[0], Allow6: f.nAllow[1],
		Reloads: f.reloads, ReloadErrorsByReason: map[FailureReason]uint64{},
	}
	for _, r := range FailureReasons {
		st.ReloadErrorsByReason[r] = f.reloadErrs[r]
		st.ReloadErrors += f.reloadErrs[r]
	}
	return st
}

// countReload records the outcome of one reload attempt.
func (f *Filter) countReload(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r := FailureOf(err); {
	case err == nil:
		f.reloads++
	case r != "":
		f.reloadErrs[r]++
	}
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
		for _, s := range []*tableSlot{f.block4, f.block6, f.allow4, f.allow6} {
			if s != nil {
				errs = append(errs, s.close())
			}
		}
		f.closeErr = errors.Join(errs...)
	})
	return f.closeErr
}
