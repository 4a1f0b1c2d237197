package tlsprobe

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Programs are the stream probe's TLS uprobe programs (bpf/stream_tls_probes.h),
// loaded by the caller, which keeps them and closes them after the Manager.
type Programs struct {
	// The OpenSSL API: SSL_read, SSL_read_ex and their return; SSL_write,
	// SSL_write_ex and their return.
	Read, ReadEx, ReadRet, Write, WriteEx, WriteRet *ebpf.Program
	// Go crypto/tls: (*Conn).Read and (*Conn).Write, entry and RETs.
	GoRead, GoReadRet, GoWrite, GoWriteRet *ebpf.Program
}

func (p *Programs) of(r role) *ebpf.Program {
	return [numRoles]*ebpf.Program{
		roleRead: p.Read, roleReadEx: p.ReadEx, roleReadRet: p.ReadRet,
		roleWrite: p.Write, roleWriteEx: p.WriteEx, roleWriteRet: p.WriteRet,
		roleGoRead: p.GoRead, roleGoReadRet: p.GoReadRet, roleGoWrite: p.GoWrite, roleGoWriteRet: p.GoWriteRet,
	}[r]
}

// attach attaches every point of plan in the file at path to pid's
// process only. On error nothing of it stays attached.
func attach(progs *Programs, path string, pid uint32, p *plan) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, err
	}
	var links []link.Link
	for _, pt := range p.points {
		prog := progs.of(pt.role)
		if prog == nil {
			closeAll(links)
			return nil, fmt.Errorf("no program for probe role %d", pt.role)
		}
		opts := &link.UprobeOptions{Address: pt.offset, PID: int(pid)}
		var l link.Link
		if pt.role.uretprobe() {
			l, err = ex.Uretprobe("", prog, opts)
		} else {
			l, err = ex.Uprobe("", prog, opts)
		}
		if err != nil {
			closeAll(links)
			return nil, fmt.Errorf("attaching at %#x: %w", pt.offset, err)
		}
		links = append(links, l)
	}
	return links, nil
}

func closeAll(links []link.Link) error {
	var errs []error
	for i := len(links) - 1; i >= 0; i-- {
		errs = append(errs, links[i].Close())
	}
	return errors.Join(errs...)
}
