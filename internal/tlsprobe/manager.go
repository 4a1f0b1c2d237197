// Package tlsprobe gives the stream probe the plaintext of TLS servers: it
// finds the processes that serve watched ports, the TLS library in each
// (the OpenSSL API in a shared libssl or linked into the executable, as in
// Node; Go's crypto/tls), attaches the stream probe's uprobes to its read
// and write functions for that process only, and detaches them when the
// process exits or the Manager closes.
//
// Files listed in Config.SystemWide are probed once for every process
// that maps them, from Start: a process's calls are then read from its
// first, even one that makes a single call and exits before a scan or the
// kernel's word could reach it (a curl run). Every process using such a
// file pays the uprobes' traps on each of its TLS calls; the programs
// return at once in the processes no watched connection led to.
//
// Processes are found two ways: a scan of /proc at Start and every
// ScanInterval (sockets listening on a watched port, in every network
// namespace, and the processes holding them; and client processes
// selected by name or pid: Config.Clients), and the kernel's word (a
// process the probe does not know read a TLS ClientHello on a watched
// port, or sent one to a client port: Discover). The scan finds servers before their first connection,
// the kernel's word finds the rest at their first (forked workers, TLS
// loaded late, libraries the probes do not know), so a process nobody
// connects to with TLS on a watched port costs nothing but the scan.
package tlsprobe

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/tokenwire/tokenwire/bpf"
)

// Config says which processes to probe and with what.
type Config struct {
	// Ports are the watched server ports.
	Ports []uint16
	// ScanInterval is how often /proc is scanned for new listeners and
	// exited processes (at least 100 ms).
	ScanInterval time.Duration
	// Programs loads the uprobe programs to attach, when the first
	// library is to be probed (a host with none loads nothing). The
	// Manager calls it once and does not close what it returns.
	Programs func() (*Programs, error)
	// Multi attaches them with uprobe_multi links (Linux 6.6+; the
	// programs loaded for it), which detach in a fraction of the time
	// perf-event links take, one per probed instruction.
	Multi bool
	// Procs is the stream probe's tw_st_tls_procs map: which processes are
	// probed, by tgid.
	Procs *ebpf.Map
	// Report, when set, is called once per distinct outcome per file (a
	// library probed; one that cannot be, and why), from the Manager's
	// goroutine.
	Report func(Target)
	// Select, when set, says which processes may be probed, by pid and
	// executable name; the others' TLS stays opaque.
	Select func(pid uint32, exe string) bool
	// Kinds are the kinds of file to probe; nil: all of them.
	Kinds []Kind
	// Clients, when set, names the client processes (calls to client
	// remote ports) to probe as the scan finds them, before their first
	// TLS connection, which is then read in full (the kernel's word comes
	// with that connection's ClientHello, too late for its first call).
	Clients func(pid uint32) bool
	// SystemWide are files (a shared libssl, an executable with OpenSSL
	// or Go's crypto/tls in it) probed at Start for every process that
	// maps them, whatever its selection: processes the selection does
	// not reach pay the uprobes' traps but are not read.
	SystemWide []string
}

// Manager attaches and detaches the TLS uprobes as processes come and go.
type Manager struct {
	cfg      Config
	ports    map[uint16]bool
	plans    planCache
	discover chan uint32
	stop     chan struct{}
	done     chan struct{}
	closeErr error
	once     sync.Once

	progs    *Programs // loaded on first need
	progsErr error

	mu       sync.Mutex // guards procs for Targets, and failures
	procs    map[uint32]*process
	failures map[Failure]uint64
	kinds    map[Kind]bool
	seen     map[uint32]sighting // processes looked into already
	reported map[string]bool
	wide     []systemWide      // Config.SystemWide's files
	covered  map[inode]Library // those of them probed
}

// lateTLSWindow is how long a listener in which a scan found no TLS library
// is looked at again, at each scan: a server may listen before it loads
// its TLS library (a Python server imports ssl when it builds its
// context), or a scan may look while its libraries are being mapped.
// After it, a plaintext server costs the scan nothing but its descriptors,
// and one that turns to TLS later is found by its first TLS connection.
const lateTLSWindow = time.Minute

// sighting is a process the Manager has looked into.
type sighting struct {
	start uint64    // its start time: a later process with its pid is another
	until time.Time // until when a listener with no TLS library is looked at again
}

// process is a process with TLS on a watched port.
type process struct {
	start   uint64
	links   []link.Link
	targets []Target
}

// Start scans for the processes to probe, probes them, and keeps doing so
// until Close.
func Start(cfg Config) (*Manager, error) {
	if cfg.Procs == nil || cfg.Programs == nil {
		return nil, errors.New("tlsprobe: no process map or programs")
	}
	cfg.ScanInterval = max(cfg.ScanInterval, 100*time.Millisecond)
	m := &Manager{
		cfg: cfg, ports: map[uint16]bool{}, discover: make(chan uint32, 64),
		stop: make(chan struct{}), done: make(chan struct{}),
		procs: map[uint32]*process{}, seen: map[uint32]sighting{}, reported: map[string]bool{},
		failures: map[Failure]uint64{}, kinds: map[Kind]bool{}, covered: map[inode]Library{},
	}
	if cfg.Kinds == nil {
		cfg.Kinds = Kinds
	}
	for _, k := range cfg.Kinds {
		m.kinds[k] = true
	}
	for _, p := range cfg.Ports {
		m.ports[p] = true
	}
	m.attachSystemWide() // first: the scan's processes need not be probed one by one
	err := m.scan()
	go m.run()
	return m, err
}

// Discover asks for pid to be probed: the kernel saw it read a TLS
// ClientHello on a watched port. It does not block.
func (m *Manager) Discover(pid uint32) {
	select {
	case m.discover <- pid:
	default: // the next scan finds listeners; the rest wait for a later connection
	}
}

func (m *Manager) run() {
	defer close(m.done)
	tick := time.NewTicker(m.cfg.ScanInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case pid := <-m.discover:
			m.probe(pid, true)
		case <-tick.C:
			m.scan()
		}
	}
}

// scan forgets processes that exited and probes new listeners.
func (m *Manager) scan() error {
	all, err := pids()
	if err != nil {
		return err
	}
	alive := make(map[uint32]bool, len(all))
	for _, pid := range all {
		alive[pid] = true
	}
	for pid, p := range m.procs {
		if start, err := startTime(pid); err != nil || start != p.start {
			m.drop(pid)
		}
	}
	for pid := range m.seen {
		if !alive[pid] {
			delete(m.seen, pid)
		}
	}
	now := time.Now()
	found, err := listeners(m.ports, func(pid uint32) bool {
		s, ok := m.seen[pid]
		if !ok || (m.procs[pid] == nil && now.Before(s.until)) {
			return false
		}
		start, err := startTime(pid)
		return err == nil && start == s.start
	})
	for _, pid := range found {
		m.probe(pid, false)
	}
	m.reconcile(alive)
	if m.cfg.Clients != nil {
		for _, pid := range all {
			if m.procs[pid] == nil && m.cfg.Clients(pid) {
				m.probe(pid, false) // one with no TLS library yet is looked at again
			}
		}
	}
	return err
}

// probe attaches the uprobes to pid's TLS libraries. discovered: the
// kernel saw it do TLS, so having none the probes know is worth a report.
func (m *Manager) probe(pid uint32, discovered bool) {
	start, err := startTime(pid)
	if err != nil {
		if discovered {
			_ = m.cfg.Procs.Delete(pid) // gone already: its pid's next process is not it
		}
		return
	}
	if s, ok := m.seen[pid]; !ok || s.start != start {
		m.seen[pid] = sighting{start: start, until: time.Now().Add(lateTLSWindow)}
	}
	if p := m.procs[pid]; p != nil && p.start == start {
		m.mark(pid, p) // the kernel forgot it (LRU): say again
		return
	} else if p != nil {
		m.drop(pid) // an earlier process with this pid
	}
	p := &process{start: start}
	if m.cfg.Select != nil && !m.cfg.Select(pid, exeName(pid)) {
		if !discovered {
			return // looked at only when the kernel sees it do TLS
		}
		p.targets = append(p.targets, Target{PID: pid, Path: exePath(pid), Library: LibUnknown, Err: errExcluded, Reason: ReasonExcluded})
	} else {
		p.targets = m.probeTargets(pid, p)
	}
	if len(p.targets) == 0 {
		if !discovered {
			return // a plaintext server, or one yet to load its TLS library
		}
		p.targets = append(p.targets, Target{PID: pid, Path: exePath(pid), Library: LibUnknown, Err: errNoTLS, Reason: ReasonNoLibrary})
	}
	// The kernel hears first: whoever sees the target can rely on its entry.
	m.mark(pid, p)
	m.mu.Lock()
	m.procs[pid] = p
	for _, t := range p.targets {
		if !t.Probed && t.Reason != ReasonExcluded {
			m.failures[Failure{t.Reason, t.Library}]++
		}
	}
	m.mu.Unlock()
	for _, t := range p.targets {
		m.report(t)
	}
}

// probeTargets attaches the uprobes to pid's TLS files, adding their
// links to p, and returns what became of each TLS file.
func (m *Manager) probeTargets(pid uint32, p *process) []Target {
	var out []Target
	for _, t := range m.targetsOf(pid) {
		if t.Err == nil && t.plan != nil && m.coveredBy(t.file) {
			t.Probed, t.SystemWide = true, true
			out = append(out, t.Target)
			continue
		}
		if t.Err == nil && t.plan != nil {
			// Seen, until marked: the uprobes may fire before (tls_proc_reads
			// reads the calls of known processes only).
			_ = m.cfg.Procs.Update(pid, bpf.StreamTwTlsProc{State: uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_SEEN)}, ebpf.UpdateNoExist)
			if t.Err = m.loadPrograms(); t.Err != nil {
				t.Reason = ReasonLoad
			}
		}
		if t.Err == nil && t.plan != nil {
			links, err := attach(m.progs, m.cfg.Multi, t.file, pid, t.plan)
			if err == nil {
				p.links = append(p.links, links...)
				t.Probed = true
			} else {
				t.Err, t.Reason = err, ReasonAttach
			}
		}
		if t.Err == nil && !t.Probed {
			continue
		}
		out = append(out, t.Target)
	}
	return out
}

// loadPrograms loads the uprobe programs the first time they are needed.
func (m *Manager) loadPrograms() error {
	if m.progs == nil && m.progsErr == nil {
		m.progs, m.progsErr = m.cfg.Programs()
		if m.progsErr == nil && m.progs == nil {
			m.progsErr = errors.New("no uprobe programs")
		}
	}
	return m.progsErr
}

// report passes t to Config.Report, once per file and outcome.
func (m *Manager) report(t Target) {
	key := fmt.Sprintf("%s|%s|%v|%v", t.Path, t.Library, t.Probed, t.Err)
	if m.reported[key] || m.cfg.Report == nil {
		return
	}
	if len(m.reported) >= 4096 {
		clear(m.reported)
	}
	m.reported[key] = true
	m.cfg.Report(t)
}

// drop detaches what was attached for pid and forgets it.
func (m *Manager) drop(pid uint32) error {
	m.mu.Lock()
	p := m.procs[pid]
	m.mu.Unlock()
	if p == nil {
		return nil
	}
	err := closeAll(p.links, m.cfg.Multi)
	if derr := m.cfg.Procs.Delete(pid); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
		err = errors.Join(err, derr)
	}
	// Gone from Targets once nothing of it is left.
	m.mu.Lock()
	delete(m.procs, pid)
	m.mu.Unlock()
	return err
}

// Targets returns what is probed, or found unprobeable, in the processes
// that are running, and the files probed for every process (PID 0).
func (m *Manager) Targets() []Target {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Target
	for _, w := range m.wide {
		out = append(out, w.target)
	}
	for _, p := range m.procs {
		out = append(out, p.targets...)
	}
	return out
}

// Failures returns the probe failures so far, counted once per file per
// process, by reason and library.
func (m *Manager) Failures() map[Failure]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.failures)
}

// Close detaches every uprobe. It may be called more than once.
func (m *Manager) Close() error {
	m.once.Do(func() {
		close(m.stop)
		<-m.done
		// Processes at once: each detach waits on the kernel (closeAll).
		pids := make([]uint32, 0, len(m.procs))
		for pid := range m.procs {
			pids = append(pids, pid)
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(pids))
		for _, pid := range pids {
			if m.cfg.Multi {
				wg.Go(func() { errs <- m.drop(pid) })
			} else {
				errs <- m.drop(pid)
			}
		}
		wg.Wait()
		close(errs)
		var all []error
		for _, w := range m.wide {
			all = append(all, closeAll(w.links, m.cfg.Multi))
		}
		for err := range errs {
			all = append(all, err)
		}
		m.closeErr = errors.Join(all...)
	})
	return m.closeErr
}
