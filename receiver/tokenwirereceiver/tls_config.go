package tokenwirereceiver

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/tlsprobe"
)

// Bounds of streams.tls.scan_interval: each scan reads /proc/*/net/tcp once
// per network namespace and the descriptors of new processes, so faster
// than 100 ms costs more than it finds; slower than 10 m leaves servers
// started later opaque for too long.
const (
	DefaultTLSScanInterval = stream.DefaultTLSScanInterval
	MinTLSScanInterval     = 100 * time.Millisecond
	MaxTLSScanInterval     = 10 * time.Minute
)

// StreamsTLSConfig says how streams over TLS are read.
//
// It is on by default: whoever lists streams.ports has asked for the
// streams of those ports measured, most of that traffic is TLS, and
// without uprobes a TLS stream is only timed (no method, route, model,
// status, traceparent or token usage). The uprobes go only into processes
// that listen on a watched port (and pass streams.pids and
// streams.process_names), and a process that cannot be probed keeps its
// TLS timed from record headers (mode opaque) without failing Start.
type StreamsTLSConfig struct {
	// Enabled attaches uprobes to the TLS library of each process serving
	// a watched port, so that its TLS streams are read as plaintext (mode
	// tls). Off, no process is touched and TLS streams are timed from
	// their record headers (mode opaque).
	Enabled bool `mapstructure:"enabled"`
	// Libraries are the kinds of TLS code probed: libssl (a shared
	// OpenSSL 1.1 or 3: Python, Ruby, nginx, curl), openssl_static
	// (OpenSSL or BoringSSL linked into the executable: Node, Envoy) and
	// go (crypto/tls). The others' TLS streams stay opaque.
	Libraries []string `mapstructure:"libraries"`
	// ExcludeProcessNames are executable names never probed, whatever
	// else selects them: their TLS streams stay opaque.
	ExcludeProcessNames []string `mapstructure:"exclude_process_names"`
	// ScanInterval is how often /proc is scanned for processes newly
	// serving a watched port (to probe them) and for probed ones that
	// exited (to detach). A process the scan has not found yet is probed
	// at its first TLS connection, which stays opaque.
	ScanInterval time.Duration `mapstructure:"scan_interval"`
	// SystemWide are files (a shared libssl such as
	// /usr/lib/x86_64-linux-gnu/libssl.so.3, an executable with OpenSSL
	// or Go's crypto/tls in it) probed at Start for every process that
	// maps them. A process's TLS calls are then read from its first, even
	// a one-shot client that exits before a scan or its first connection
	// could get it probed (a curl run). The cost: every TLS call of every
	// process on the host using such a file traps into the kernel, read
	// or not. Empty (the default): files are probed per selected process.
	SystemWide []string `mapstructure:"system_wide"`
}

func defaultStreamsTLS() StreamsTLSConfig {
	kinds := make([]string, len(tlsprobe.Kinds))
	for i, k := range tlsprobe.Kinds {
		kinds[i] = string(k)
	}
	return StreamsTLSConfig{Enabled: true, Libraries: kinds, ScanInterval: DefaultTLSScanInterval}
}

func (c *StreamsTLSConfig) validate() []error {
	var errs []error
	if c.ScanInterval < MinTLSScanInterval || c.ScanInterval > MaxTLSScanInterval {
		errs = append(errs, fmt.Errorf("streams.tls.scan_interval: must be between %v and %v, got %v", MinTLSScanInterval, MaxTLSScanInterval, c.ScanInterval))
	}
	if c.Enabled && c.Libraries != nil && len(c.Libraries) == 0 {
		errs = append(errs, fmt.Errorf("streams.tls.libraries: empty list (set streams.tls.enabled: false to probe none)"))
	}
	seen := map[string]bool{}
	for i, l := range c.Libraries {
		switch {
		case !slices.Contains(tlsprobe.Kinds, tlsprobe.Kind(l)):
			errs = append(errs, fmt.Errorf("streams.tls.libraries[%d]: %q is not one of %v", i, l, tlsprobe.Kinds))
		case seen[l]:
			errs = append(errs, fmt.Errorf("streams.tls.libraries[%d]: %q is listed twice", i, l))
		}
		seen[l] = true
	}
	files := map[string]bool{}
	for i, f := range c.SystemWide {
		switch {
		case !filepath.IsAbs(f) || filepath.Clean(f) != f:
			errs = append(errs, fmt.Errorf("streams.tls.system_wide[%d]: %q is not a clean absolute path", i, f))
		case files[f]:
			errs = append(errs, fmt.Errorf("streams.tls.system_wide[%d]: %q is listed twice", i, f))
		}
		files[f] = true
	}
	for i, n := range c.ExcludeProcessNames {
		if n == "" || filepath.Base(n) != n {
			errs = append(errs, fmt.Errorf("streams.tls.exclude_process_names[%d]: %q is not an executable name (no '/', not empty)", i, n))
		}
	}
	return errs
}

// probe is what the stream probe needs of the streams config; report
// hears of each TLS library probed, or not.
func (s *StreamsConfig) probe(report func(tlsprobe.Target)) stream.TLSConfig {
	c := &s.TLS
	kinds := []tlsprobe.Kind{}
	for _, l := range c.Libraries {
		kinds = append(kinds, tlsprobe.Kind(l))
	}
	if c.Libraries == nil {
		kinds = nil // all
	}
	pids := map[uint32]bool{}
	for _, p := range s.Pids {
		pids[uint32(p)] = true
	}
	names := map[string]bool{}
	for _, n := range s.ProcessNames {
		names[n] = true
	}
	excluded := map[string]bool{}
	for _, n := range c.ExcludeProcessNames {
		excluded[n] = true
	}
	// The streams filter selects a process by pid or by name; a process it
	// drops the streams of is not worth a uprobe, unless it is a client
	// streams.clients selects (the kernel reports those only when they
	// call a client remote port).
	clients := s.Clients.selects()
	sel := func(pid uint32, exe string) bool {
		if excluded[exe] {
			return false
		}
		return len(pids)+len(names) == 0 || pids[pid] || names[exe] || clients(pid, exe)
	}
	return stream.TLSConfig{Enabled: c.Enabled, ScanInterval: c.ScanInterval, Report: report, Select: sel, Kinds: kinds,
		Clients: s.Clients.candidates(clients), SystemWide: c.SystemWide}
}
