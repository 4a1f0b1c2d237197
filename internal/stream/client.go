package stream

import (
	"fmt"

	"github.com/tokenwire/tokenwire/bpf"
)

// Limits of ClientConfig: the kernel reads the lists from .rodata (no map
// lookup per event), so they are short (MAX_CLIENT_* in
// bpf/stream_client.h).
const (
	MaxClientPorts = 16
	MaxClientPids  = 16
	MaxClientNames = 8
	// MaxCommLen is the longest process name the kernel keeps (comm, as
	// /proc/PID/comm shows it): longer names are compared cut to it.
	MaxCommLen = 15
)

// ClientConfig selects the client connections whose calls are measured:
// connections this host opened to one of RemotePorts, by a process in
// Pids or named in Names (neither: any process). No RemotePorts: none.
type ClientConfig struct {
	RemotePorts []uint16
	Pids        []uint32
	// Names are process names as /proc/PID/comm shows them (the
	// executable's name, cut to MaxCommLen bytes).
	Names []string
}

// clientVars returns the .rodata values of c.
func (c ClientConfig) clientVars() (map[string]any, error) {
	if len(c.RemotePorts) > MaxClientPorts || len(c.Pids) > MaxClientPids || len(c.Names) > MaxClientNames {
		return nil, fmt.Errorf("client selection: at most %d remote ports, %d pids and %d process names",
			MaxClientPorts, MaxClientPids, MaxClientNames)
	}
	var ports [MaxClientPorts]uint16
	copy(ports[:], c.RemotePorts)
	var pids [MaxClientPids]uint32
	copy(pids[:], c.Pids)
	var comms, masks [MaxClientNames][2]uint64
	for i, n := range c.Names {
		comms[i], masks[i] = commWords(n), commMask(n)
	}
	return map[string]any{
		"client_ports":      ports,
		"n_client_ports":    uint8(len(c.RemotePorts)),
		"client_pids":       pids,
		"n_client_pids":     uint8(len(c.Pids)),
		"client_comms":      comms,
		"client_comm_masks": masks,
		"n_client_comms":    uint8(len(c.Names)),
	}, nil
}

// commWords is name as the kernel's 16-byte comm holds it (cut to
// MaxCommLen bytes, NUL-padded), as two little-endian words.
func commWords(name string) [2]uint64 {
	var b [16]byte
	copy(b[:MaxCommLen], name)
	var w [2]uint64
	for i := range 16 {
		w[i/8] |= uint64(b[i]) << (8 * (i % 8))
	}
	return w
}

// commMask selects the bytes of a 16-byte comm that tell whether it is
// name: name's (cut to MaxCommLen) and the NUL after it. The bytes after
// that NUL are left out: before Linux 5.17, exec copied the new name over
// the old one without clearing the rest, so a curl started by a process
// whose name was longer keeps that name's tail there.
func commMask(name string) [2]uint64 {
	n := min(len(name), MaxCommLen) + 1
	var w [2]uint64
	for i := range n {
		w[i/8] |= 0xff << (8 * (i % 8))
	}
	return w
}

// Client reports whether the stream is a client connection's call: the
// request written by this host, the response read (Local is the client,
// Remote the server).
func (s *Stats) Client() bool { return s.Flags&StatsClient != 0 }

// StatsClient flags the Stats of a client connection's call.
const StatsClient = uint32(bpf.StreamTwStatsFlagTW_STATS_CLIENT)
