package tlsprobe

import (
	"errors"
	"os"
)

// Target is what became of one TLS library (or executable) in a process.
type Target struct {
	PID     uint32
	Path    string // as the process names it
	Library Library
	Version string // Go: the toolchain that built it
	// Probed: its uprobes are attached (by SystemWide, when the file is
	// probed for every process). Otherwise Err says why not,
	// Reason sums it up, and the process's TLS streams are timed from
	// record headers (opaque).
	Probed bool
	// SystemWide: probed by Config.SystemWide's uprobes, not its own. A
	// Target with PID 0 is one of those files itself.
	SystemWide bool
	Err        error
	Reason     Reason
}

// candidate is a file of a process that may hold a TLS library.
type candidate struct {
	Target
	file string // the path to open and attach, through /proc
	plan *plan
}

// targetsOf inspects pid's executable and shared TLS libraries.
func (m *Manager) targetsOf(pid uint32) []candidate {
	var out []candidate
	// An executable is read only when one of its kinds is probed: node's
	// is 100 MB.
	if m.kinds[KindOpenSSLStatic] || m.kinds[KindGo] {
		exe := candidate{Target: Target{PID: pid, Path: exePath(pid)}, file: procPath(pid, "exe")}
		exe.plan, exe.Err = m.plans.inspect(exe.file, false)
		if exe.plan != nil && !m.kinds[kindOf(exe.plan, false)] {
			exe.Library, exe.plan, exe.Err = exe.plan.lib, nil, errExcluded
		}
		out = append(out, exe)
	}
	libs, err := tlsLibraries(pid)
	if err != nil {
		return out
	}
	for _, lib := range libs {
		c := candidate{Target: Target{PID: pid, Path: lib, Library: LibOpenSSL}, file: inRoot(pid, lib)}
		if m.kinds[KindLibSSL] {
			c.plan, c.Err = m.plans.inspect(c.file, true)
		} else {
			c.Err = errExcluded
		}
		out = append(out, c)
	}
	for i := range out {
		c := &out[i]
		switch {
		case errors.Is(c.Err, errNoTLS):
			c.Err, c.plan = nil, nil // nothing to probe in this file
		case errors.Is(c.Err, errExcluded):
			c.Reason = ReasonExcluded
		case c.Err != nil:
			c.Reason = inspectReason(c.Err)
		}
		if c.plan != nil {
			c.Library, c.Version = c.plan.lib, c.plan.version
		} else if c.Err != nil && c.Library == "" {
			c.Library = LibUnknown
		}
	}
	return out
}

// kindOf is the kind of file a plan probes: a shared library, or an
// executable's OpenSSL or Go.
func kindOf(p *plan, lib bool) Kind {
	switch {
	case lib:
		return KindLibSSL
	case p.lib == LibGo:
		return KindGo
	}
	return KindOpenSSLStatic
}

func exePath(pid uint32) string {
	p, err := os.Readlink(procPath(pid, "exe"))
	if err != nil {
		return procPath(pid, "exe")
	}
	return p
}
