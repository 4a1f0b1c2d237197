package tlsprobe

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/cilium/ebpf/link"
)

// inode names a file whatever path reaches it: a process's libssl seen
// through /proc/<pid>/root is the file probed system-wide if its device
// and inode are.
type inode struct{ dev, ino uint64 }

func inodeOf(path string) (inode, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return inode{}, err
	}
	return inode{dev: st.Dev, ino: st.Ino}, nil
}

// systemWide is a file probed for every process that maps it
// (Config.SystemWide).
type systemWide struct {
	target Target
	links  []link.Link
}

// attachSystemWide probes each of Config.SystemWide's files for every
// process: their uprobes fire in processes that start after Start too,
// from their first call. One that cannot be probed is reported and
// counted like a process's library, and probed per process instead.
func (m *Manager) attachSystemWide() {
	done := map[inode]bool{}
	for _, path := range m.cfg.SystemWide {
		t := Target{Path: path, Library: LibUnknown}
		id, err := inodeOf(path)
		if err == nil && done[id] {
			continue // another path to a file listed already (/lib and /usr/lib): its uprobes would run twice
		}
		done[id] = err == nil
		var p *plan
		if err == nil {
			p, err = m.plans.inspect(path, false)
		}
		if err == nil {
			err = m.loadPrograms()
			if err != nil {
				t.Reason = ReasonLoad
			}
		}
		var links []link.Link
		if err == nil {
			t.Library, t.Version = p.lib, p.version
			if links, err = attach(m.progs, m.cfg.Multi, path, 0, p); err != nil {
				t.Reason = ReasonAttach
			}
		}
		switch {
		case err == nil:
			t.Probed, t.SystemWide = true, true
			m.covered[id] = t.Library
		case t.Reason == "":
			t.Reason = inspectReason(err)
			if errors.Is(err, errNoTLS) {
				t.Reason = ReasonNoLibrary
			}
		}
		if err != nil {
			t.Err = fmt.Errorf("probing %s for every process: %w", path, err)
		}
		m.mu.Lock()
		if err != nil {
			m.failures[Failure{t.Reason, t.Library}]++
		}
		m.wide = append(m.wide, systemWide{target: t, links: links})
		m.mu.Unlock()
		m.report(t)
	}
}

// coveredBy says whether file (a path through /proc) is probed
// system-wide already: a process's own uprobes on it would run twice per
// call.
func (m *Manager) coveredBy(file string) bool {
	if len(m.covered) == 0 {
		return false
	}
	id, err := inodeOf(file)
	if err != nil {
		return false
	}
	_, ok := m.covered[id]
	return ok
}
