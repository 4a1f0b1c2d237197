package stream

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"

	"github.com/tokenwire/tokenwire/internal/probe"
	"github.com/tokenwire/tokenwire/internal/tlsprobe"
)

// TLSConfig says whether and how TLS servers' plaintext is read.
type TLSConfig struct {
	// Enabled attaches uprobes to the TLS library of each process that
	// serves a watched port (OpenSSL API, Go crypto/tls), so that its TLS
	// streams are read as plaintext (mode tls). Without them, TLS streams
	// are timed from their record headers (opaque).
	Enabled bool
	// ScanInterval is how often /proc is scanned for new servers and
	// exited ones (default 5 s).
	ScanInterval time.Duration
	// Report is called once per distinct outcome per TLS library or
	// executable: probed, or not and why.
	Report func(tlsprobe.Target)
	// Select, when set, says which processes may be probed (pid and
	// executable name).
	Select func(pid uint32, exe string) bool
	// Kinds are the kinds of TLS file to probe; nil: all.
	Kinds []tlsprobe.Kind
	// Clients, when set, names the client processes to probe as the
	// /proc scan finds them (tlsprobe.Config.Clients).
	Clients func(pid uint32) bool
	// SystemWide are files probed for every process that maps them
	// (tlsprobe.Config.SystemWide).
	SystemWide []string
}

// DefaultTLSScanInterval is TLSConfig.ScanInterval's default.
const DefaultTLSScanInterval = 5 * time.Second

// tlsState is the tracer's TLS part: the manager that attaches the
// uprobes, and their programs once loaded.
type tlsState struct {
	manager *tlsprobe.Manager
	stop    sync.Once
	stopErr error

	mu    sync.Mutex // guards progs and err, set from the manager's goroutine
	progs []*ebpf.Program
	err   error // why TLS plaintext is off, when it was asked for
}

func (s *tlsState) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// tlsObjects are the uprobe programs of the collection, loaded together.
type tlsObjects struct {
	Read      *ebpf.Program `ebpf:"tw_tls_rd"`
	ReadEx    *ebpf.Program `ebpf:"tw_tls_rdex"`
	ReadRet   *ebpf.Program `ebpf:"tw_tls_rd_ret"`
	Write     *ebpf.Program `ebpf:"tw_tls_wr"`
	WriteEx   *ebpf.Program `ebpf:"tw_tls_wrex"`
	WriteRet  *ebpf.Program `ebpf:"tw_tls_wr_ret"`
	GoRead    *ebpf.Program `ebpf:"tw_tls_go_rd"`
	GoReadRet *ebpf.Program `ebpf:"tw_tls_go_rdret"`
	GoWrite   *ebpf.Program `ebpf:"tw_tls_go_wr"`
}

// startTLS starts the manager that attaches the uprobe programs, which
// are loaded against the tracer's maps when the first TLS library is to
// be probed. A failure leaves streams running, their TLS opaque; TLSError
// says why.
func (t *Tracer) startTLS(cfg Config, spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map) {
	// uprobe_multi links (Linux 6.6+) detach far faster than one
	// perf-event link per probed instruction; programs are loaded for the
	// one or the other.
	multi := features.HaveBPFLinkUprobeMulti() == nil && !cfg.tlsPerfLinks
	m, err := tlsprobe.Start(tlsprobe.Config{
		Ports:        cfg.Ports,
		ScanInterval: cmpDuration(cfg.TLS.ScanInterval, DefaultTLSScanInterval),
		Programs:     func() (*tlsprobe.Programs, error) { return t.loadTLS(spec, maps, multi) },
		Multi:        multi,
		Procs:        t.maps.TwStTlsProcs,
		Report:       cfg.TLS.Report,
		Select:       cfg.TLS.Select,
		Kinds:        cfg.TLS.Kinds,
		Clients:      cfg.TLS.Clients,
		SystemWide:   cfg.TLS.SystemWide,
	})
	t.tls.manager = m
	if err != nil {
		t.tls.setErr(fmt.Errorf("looking for TLS servers: %w", err))
	}
}

// loadTLS loads the uprobe programs (for uprobe_multi links when multi)
// against the tracer's maps, the values of their read-only globals
// inlined (probe.InlineReadOnly).
func (t *Tracer) loadTLS(spec *ebpf.CollectionSpec, maps map[string]*ebpf.Map, multi bool) (*tlsprobe.Programs, error) {
	attachType := ebpf.AttachNone
	if multi {
		attachType = ebpf.AttachTraceUprobeMulti
	}
	some := spec.Copy()
	for name, ps := range some.Programs {
		if ps.Type != ebpf.Kprobe || !strings.HasPrefix(ps.SectionName, "uprobe") && !strings.HasPrefix(ps.SectionName, "uretprobe") {
			delete(some.Programs, name)
			continue
		}
		ps.AttachType = attachType
	}
	if _, err := probe.InlineReadOnly(some); err != nil {
		t.tls.setErr(err)
		return nil, err
	}
	var objs tlsObjects
	if err := some.LoadAndAssign(&objs, &ebpf.CollectionOptions{MapReplacements: maps, Cache: probe.KernelBTF()}); err != nil {
		err = fmt.Errorf("loading the TLS uprobes: %w", err)
		t.tls.setErr(err)
		return nil, err
	}
	t.tls.mu.Lock()
	t.tls.progs = []*ebpf.Program{objs.Read, objs.ReadEx, objs.ReadRet, objs.Write, objs.WriteEx, objs.WriteRet,
		objs.GoRead, objs.GoReadRet, objs.GoWrite}
	t.tls.mu.Unlock()
	return &tlsprobe.Programs{
		Read: objs.Read, ReadEx: objs.ReadEx, ReadRet: objs.ReadRet,
		Write: objs.Write, WriteEx: objs.WriteEx, WriteRet: objs.WriteRet,
		GoRead: objs.GoRead, GoReadRet: objs.GoReadRet, GoWrite: objs.GoWrite,
	}, nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// stopTLS detaches every uprobe and unloads their programs. It may be
// called more than once.
func (t *Tracer) stopTLS() error {
	t.tls.stop.Do(func() {
		var errs []error
		if t.tls.manager != nil {
			errs = append(errs, t.tls.manager.Close())
		}
		t.tls.mu.Lock()
		defer t.tls.mu.Unlock()
		for _, p := range t.tls.progs {
			errs = append(errs, p.Close())
		}
		t.tls.progs = nil
		t.tls.stopErr = errors.Join(errs...)
	})
	return t.tls.stopErr
}

// TLSError says why TLS streams are not read as plaintext although that
// was asked for (nil: they are, where a library is probed).
func (t *Tracer) TLSError() error {
	t.tls.mu.Lock()
	defer t.tls.mu.Unlock()
	return t.tls.err
}

// TLSTargets returns the TLS libraries probed, or found unprobeable, in
// the running processes that serve watched ports.
func (t *Tracer) TLSTargets() []tlsprobe.Target {
	if t.tls.manager == nil {
		return nil
	}
	return t.tls.manager.Targets()
}

// TLSFailures returns the TLS probe failures so far, by reason and
// library (none when TLS plaintext is off).
func (t *Tracer) TLSFailures() map[tlsprobe.Failure]uint64 {
	if t.tls.manager == nil {
		return nil
	}
	return t.tls.manager.Failures()
}

// TLSPrograms returns the TLS uprobe programs, for measuring their cost:
// none until a TLS library was to be probed.
func (t *Tracer) TLSPrograms() []*ebpf.Program {
	t.tls.mu.Lock()
	defer t.tls.mu.Unlock()
	return t.tls.progs
}
