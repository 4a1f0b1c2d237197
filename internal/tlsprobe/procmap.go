package tlsprobe

import (
	"github.com/tokenwire/tokenwire/bpf"
)

// The kernel's process map (Config.Procs, tw_st_tls_procs) says, per
// tgid, whether a process's TLS is read through uprobes: the kernel adds
// the processes it sees do TLS on a watched connection (seen), the
// Manager says what became of them (probed, or unprobeable).

// mark tells the kernel how to read pid's TLS.
func (m *Manager) mark(pid uint32, p *process) {
	v := bpf.StreamTwTlsProc{State: uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_UNPROBEABLE)}
	for _, t := range p.targets {
		if t.Probed {
			v.State = uint8(bpf.StreamTwTlsProcStateTW_TLS_PROC_PROBED)
			v.Libs |= libBits(t.Library)
		}
	}
	m.cfg.Procs.Put(pid, v)
}

func libBits(l Library) uint8 {
	switch l {
	case LibOpenSSL:
		return uint8(bpf.StreamTwTlsLibTW_TLS_LIB_OPENSSL)
	case LibGo:
		return uint8(bpf.StreamTwTlsLibTW_TLS_LIB_GO)
	}
	return 0
}

// reconcile settles the differences between the kernel's process map and
// the Manager's processes.
//
// Processes the kernel knows and the Manager does not were reported while
// Discover's queue was full, or exited before it looked. A live one is
// probed as if just reported; a gone one's entry is deleted, so that a
// process that later takes its pid is not mistaken for it (with
// system-wide files its calls would be taken as a probed process's).
//
// Processes the Manager knows and the kernel does not lost their entry to
// the map's LRU eviction (it holds tw_st_tls_procs' max_entries
// processes): each is marked again, or the kernel would stop reading a
// probed process's TLS until its next connection.
func (m *Manager) reconcile(alive map[uint32]bool) {
	var (
		pid     uint32
		v       bpf.StreamTwTlsProc
		orphans []uint32
	)
	inMap := make(map[uint32]bool, len(m.procs))
	it := m.cfg.Procs.Iterate()
	for it.Next(&pid, &v) {
		inMap[pid] = true
		if m.procs[pid] == nil {
			orphans = append(orphans, pid)
		}
	}
	if it.Err() == nil {
		for pid, p := range m.procs {
			if !inMap[pid] {
				m.mark(pid, p)
			}
		}
	}
	for _, pid := range orphans {
		// Started after the scan listed the processes: alive all the same.
		if _, err := startTime(pid); alive[pid] || err == nil {
			m.probe(pid, true)
		} else {
			_ = m.cfg.Procs.Delete(pid) // an error: gone meanwhile, or the next scan tries again
		}
	}
}
