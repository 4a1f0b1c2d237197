package tlsprobe

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Programs are the stream probe's TLS uprobe programs (bpf/stream_tls_probes.h),
// loaded by the caller, which keeps them and closes them after the Manager.
type Programs struct {
	// The OpenSSL API: SSL_read, SSL_read_ex and their return; SSL_write,
	// SSL_write_ex and their return.
	Read, ReadEx, ReadRet, Write, WriteEx, WriteRet *ebpf.Program
	// Go crypto/tls: (*Conn).Read, entry and RETs; (*Conn).Write, entry.
	GoRead, GoReadRet, GoWrite *ebpf.Program
}

func (p *Programs) of(r role) *ebpf.Program {
	return [numRoles]*ebpf.Program{
		roleRead: p.Read, roleReadEx: p.ReadEx, roleReadRet: p.ReadRet,
		roleWrite: p.Write, roleWriteEx: p.WriteEx, roleWriteRet: p.WriteRet,
		roleGoRead: p.GoRead, roleGoReadRet: p.GoReadRet, roleGoWrite: p.GoWrite,
	}[r]
}

// attach attaches every point of plan in the file at path to pid's
// process only: with multi, one uprobe_multi link per program (Linux
// 6.6+), else one perf-event link per point. On error nothing of it stays
// attached.
func attach(progs *Programs, multi bool, path string, pid uint32, p *plan) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		closeAll(links, multi)
		return nil, err
	}
	byRole := map[role][]uint64{}
	for _, pt := range p.points {
		byRole[pt.role] = append(byRole[pt.role], pt.offset)
	}
	for r := range numRoles {
		offsets := byRole[r]
		if len(offsets) == 0 {
			continue
		}
		prog := progs.of(r)
		if prog == nil {
			return fail(fmt.Errorf("no program for probe role %d", r))
		}
		if multi {
			opts := &link.UprobeMultiOptions{Addresses: offsets, PID: pid}
			var l link.Link
			if r.uretprobe() {
				l, err = ex.UretprobeMulti(nil, prog, opts)
			} else {
				l, err = ex.UprobeMulti(nil, prog, opts)
			}
			if err != nil {
				return fail(fmt.Errorf("attaching at %#x: %w", offsets, err))
			}
			links = append(links, l)
			continue
		}
		for _, off := range offsets {
			opts := &link.UprobeOptions{Address: off, PID: int(pid)}
			var l link.Link
			if r.uretprobe() {
				l, err = ex.Uretprobe("", prog, opts)
			} else {
				l, err = ex.Uprobe("", prog, opts)
			}
			if err != nil {
				return fail(fmt.Errorf("attaching at %#x: %w", off, err))
			}
			links = append(links, l)
		}
	}
	return links, nil
}

// closeAll detaches links. Detaching a uprobe waits for the kernel to
// know no CPU runs it (a third of a second on this project's 6.18 VMs per
// perf-event link): uprobe_multi links are closed at once, so that their
// waits overlap; perf-event ones in turn, which contend otherwise.
func closeAll(links []link.Link, concurrent bool) error {
	errs := make([]error, len(links))
	var wg sync.WaitGroup
	for i := len(links) - 1; i >= 0; i-- {
		if concurrent {
			wg.Go(func() { errs[i] = links[i].Close() })
		} else {
			errs[i] = links[i].Close()
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}
