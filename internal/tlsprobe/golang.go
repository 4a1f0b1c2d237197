package tlsprobe

import (
	"debug/buildinfo"
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/arch/x86/x86asm"
)

// Go's crypto/tls functions the probe reads, as the symbol table names them.
const (
	goRead  = "crypto/tls.(*Conn).Read"
	goWrite = "crypto/tls.(*Conn).Write"
)

// errNotGo: the file is no Go program.
var errNotGo = errors.New("not a Go program")

// goPlan finds crypto/tls's Read and Write in a Go executable and where to
// probe them: their entries, and every RET instruction of Read (a read's
// plaintext is there only when it returns; a write's socket write ends
// it, bpf/stream_tls.h's go_write_sent). It returns
// errNotGo for a file that is no Go program, and (nil, nil) for one that
// has no crypto/tls.
func goPlan(r io.ReaderAt, f *elf.File) (*plan, error) {
	bi, err := buildinfo.Read(r)
	if err != nil {
		return nil, errNotGo
	}
	if !registerABI(bi.GoVersion) {
		return nil, fmt.Errorf("built with %s, which passes arguments on the stack (the probes read Go 1.17+'s registers)", bi.GoVersion)
	}
	fns, err := symbols(f, goRead, goWrite)
	if err != nil || len(fns) < 2 {
		// Stripped of its symbol table: the pclntab still names functions.
		fns, err = pclnFunctions(f, goRead, goWrite)
		if err != nil {
			return nil, err
		}
	}
	if len(fns) == 0 {
		return nil, nil
	}
	if len(fns) < 2 {
		return nil, fmt.Errorf("%s: only one of %s and %s", bi.GoVersion, goRead, goWrite)
	}
	p := &plan{lib: LibGo, version: bi.GoVersion}
	for _, x := range []struct {
		name  string
		entry role
		ret   bool
	}{{goRead, roleGoRead, true}, {goWrite, roleGoWrite, false}} {
		fn := fns[x.name]
		b, err := code(f, fn)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.name, err)
		}
		p.points = append(p.points, point{role: x.entry, offset: fn.Offset + entryOffset(b)})
		if !x.ret {
			continue
		}
		rets, err := retOffsets(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", x.name, err)
		}
		for _, r := range rets {
			p.points = append(p.points, point{role: roleGoReadRet, offset: fn.Offset + r})
		}
	}
	return p, nil
}

// registerABI reports whether a Go release passes arguments in registers
// on amd64 (Go 1.17 and later).
func registerABI(version string) bool {
	v, ok := strings.CutPrefix(version, "go1.")
	if !ok {
		return false
	}
	if i := strings.IndexAny(v, ".rcb-+ "); i >= 0 {
		v = v[:i]
	}
	minor, err := strconv.Atoi(v)
	return err == nil && minor >= 17
}

// entryOffset returns where in a Go function's machine code b its entry
// uprobe goes: on the conditional jump of the stack check it begins with
// (CMPQ SP, 16(R14), after LEAQ -frame(SP), R12 for a large frame), or at
// its first byte if it begins otherwise. The kernel emulates a jump, where
// it single-steps a compare out of line: a second trap, the dearer part of
// a uprobe on a virtual machine (bench/uprobetrap). Neither instruction
// before the jump writes a register that carries arguments (AX, BX, CX,
// DI, SI, R8-R11) or the goroutine (R14), and a call that grows its stack
// runs the jump again, as it ran the function's first byte again.
func entryOffset(b []byte) uint64 {
	for off, i := 0, 0; i < 3 && off < len(b); i++ {
		inst, err := x86asm.Decode(b[off:], 64)
		if err != nil {
			return 0
		}
		switch {
		case inst.Op == x86asm.JBE && i > 0:
			return uint64(off)
		case inst.Op == x86asm.LEA && i == 0 && inst.Args[0] == x86asm.R12:
		case inst.Op == x86asm.CMP && stackGuard(inst.Args[1]):
		default:
			return 0
		}
		off += inst.Len
	}
	return 0
}

// stackGuard reports whether a is the goroutine's stack guard, 16(R14).
func stackGuard(a x86asm.Arg) bool {
	m, ok := a.(x86asm.Mem)
	return ok && m.Base == x86asm.R14 && m.Index == 0 && m.Disp == 16
}

// retOffsets decodes a function's machine code b and returns the offset
// of each RET in it. A uretprobe rewrites the return address on the
// stack, which the Go runtime copies elsewhere when it grows a goroutine's
// stack; uprobes on the RET instructions see the same registers without
// touching it.
func retOffsets(b []byte) ([]uint64, error) {
	var rets []uint64
	for off := 0; off < len(b); {
		inst, err := x86asm.Decode(b[off:], 64)
		if err != nil {
			return nil, fmt.Errorf("decoding at +%#x: %w", off, err)
		}
		if inst.Op == x86asm.RET {
			rets = append(rets, uint64(off))
		}
		off += inst.Len
	}
	if len(rets) == 0 {
		return nil, errors.New("no RET instruction")
	}
	return rets, nil
}

// pclnFunctions finds functions through the Go pclntab, which stripped
// binaries keep (the runtime needs it for stack traces).
func pclnFunctions(f *elf.File, names ...string) (map[string]function, error) {
	sec := f.Section(".gopclntab")
	text := f.Section(".text")
	if sec == nil || text == nil {
		return nil, errors.New("no symbol table and no .gopclntab")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, fmt.Errorf("reading .gopclntab: %w", err)
	}
	out := map[string]function{}
	for _, n := range names {
		fn := tab.LookupFunc(n)
		if fn == nil {
			continue
		}
		if off, ok := fileOffset(f, fn.Entry); ok {
			out[n] = function{Offset: off, Addr: fn.Entry, Size: fn.End - fn.Entry}
		}
	}
	return out, nil
}
