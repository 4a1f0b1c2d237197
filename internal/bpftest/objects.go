package bpftest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// Objects lists the BPF programs, maps and links that this process holds
// open file descriptors for, beyond those it held at its Baseline.
//
// Counting this process's own descriptors (from /proc/self/fdinfo) rather
// than every object on the host keeps other processes out of the count:
// a tokenwire collector on the same machine, or another test package that
// `go test ./...` runs in parallel. An object of ours that outlives our
// last descriptor would have to be pinned, and tokenwire pins nothing.
type Objects struct {
	Programs []string
	Maps     []string
	Links    int
}

func (o Objects) String() string {
	return fmt.Sprintf("programs %v, maps %v, links %d", o.Programs, o.Maps, o.Links)
}

// Empty reports whether the snapshot holds nothing.
func (o Objects) Empty() bool { return len(o.Programs) == 0 && len(o.Maps) == 0 && o.Links == 0 }

// Baseline remembers the BPF descriptors this process has before a test.
type Baseline struct{ fds map[string]bool }

// NewBaseline records the BPF descriptors open right now.
func NewBaseline() (*Baseline, error) {
	b := &Baseline{fds: map[string]bool{}}
	fds, err := bpfFDs()
	for _, fd := range fds {
		b.fds[fd.key()] = true
	}
	return b, err
}

// WaitGone polls Ours until it is empty or timeout passes, and returns the
// last snapshot (a goroutine may still be closing what it held).
func (b *Baseline) WaitGone(timeout time.Duration) (Objects, error) {
	deadline := time.Now().Add(timeout)
	for {
		o, err := b.Ours()
		if err != nil || o.Empty() || time.Now().After(deadline) {
			return o, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ours lists the BPF objects this process opened since the baseline. It
// only reads: it never touches, detaches or unpins anything.
func (b *Baseline) Ours() (Objects, error) {
	var o Objects
	fds, err := bpfFDs()
	if err != nil {
		return o, err
	}
	progs, maps := map[uint32]bool{}, map[uint32]bool{}
	for _, fd := range fds {
		if b.fds[fd.key()] {
			continue
		}
		switch fd.kind {
		case "prog":
			progs[fd.id] = true
		case "map":
			maps[fd.id] = true
		case "link":
			o.Links++
		}
	}
	for id := range progs {
		o.Programs = append(o.Programs, progName(ebpf.ProgramID(id)))
	}
	for id := range maps {
		o.Maps = append(o.Maps, mapName(ebpf.MapID(id)))
	}
	slices.Sort(o.Programs)
	slices.Sort(o.Maps)
	return o, nil
}

type bpfFD struct {
	fd   string
	kind string // prog, map or link
	id   uint32
}

func (f bpfFD) key() string { return f.fd + "/" + f.kind + "/" + strconv.FormatUint(uint64(f.id), 10) }

// bpfFDs reads /proc/self/fd and fdinfo for BPF descriptors.
func bpfFDs() ([]bpfFD, error) {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var out []bpfFD
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		var kind, idKey string
		switch target {
		case "anon_inode:bpf-prog":
			kind, idKey = "prog", "prog_id:"
		case "anon_inode:bpf-map":
			kind, idKey = "map", "map_id:"
		case "anon_inode:bpf_link":
			kind, idKey = "link", "link_id:"
		default:
			continue
		}
		f, err := os.Open(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), idKey); ok {
				id, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
				out = append(out, bpfFD{fd: e.Name(), kind: kind, id: uint32(id)})
			}
		}
		f.Close()
	}
	return out, nil
}

func progName(id ebpf.ProgramID) string {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return fmt.Sprintf("prog#%d", id)
	}
	defer p.Close()
	if info, err := p.Info(); err == nil {
		return info.Name
	}
	return fmt.Sprintf("prog#%d", id)
}

func mapName(id ebpf.MapID) string {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return fmt.Sprintf("map#%d", id)
	}
	defer m.Close()
	if info, err := m.Info(); err == nil {
		return info.Name
	}
	return fmt.Sprintf("map#%d", id)
}
