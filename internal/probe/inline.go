package probe

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// InlineReadOnly writes the values of spec's read-only globals (const
// volatile variables in .rodata, set before load) into the programs that
// read them, as immediates. Call it once every variable is set.
//
// The verifier knows a frozen .rodata map's contents, and prunes the code
// they rule out, but the JIT still loads each one from the map's memory:
// a cache line apart from the socket, which every program's first test
// reads, and cold when the host's writes are sparse: reading the watched
// port from .rodata cost about as much again as the socket's own load
// (make bench, the write program's steps).
//
// Only a load of a global's address followed by a load from it into the
// same register is rewritten: the address is then dead, and the pair
// becomes a 64-bit immediate and a no-op (r = r), instruction for
// instruction, so no jump moves. A pair a jump lands between, and an
// address kept for indexing (a loop over an array with a variable index),
// are left as they are. It returns the number of loads inlined.
func InlineReadOnly(spec *ebpf.CollectionSpec) (int, error) {
	total := 0
	for name, prog := range spec.Programs {
		n, err := inlineProgram(spec, prog.Instructions)
		if err != nil {
			return total, fmt.Errorf("inlining read-only globals in %s: %w", name, err)
		}
		total += n
	}
	return total, nil
}

func inlineProgram(spec *ebpf.CollectionSpec, insns asm.Instructions) (int, error) {
	// Where jumps land, in raw instruction slots.
	offsets := make([]asm.RawInstructionOffset, len(insns))
	targets := map[asm.RawInstructionOffset]bool{}
	for it := insns.Iterate(); it.Next(); {
		offsets[it.Index] = it.Offset
		op := it.Ins.OpCode
		if class := op.Class(); !class.IsJump() || op.JumpOp() == asm.Call || op.JumpOp() == asm.Exit {
			continue
		}
		rel := int64(it.Ins.Offset)
		if op.Class() == asm.Jump32Class && op.JumpOp() == asm.Ja {
			rel = it.Ins.Constant // gotol: the offset is the immediate
		}
		targets[asm.RawInstructionOffset(int64(it.Offset)+1+rel)] = true
	}
	sections := map[string][]byte{}
	n := 0
	for i := 0; i+1 < len(insns); i++ {
		addr, load := insns[i], insns[i+1]
		if !addr.IsLoadFromMap() || addr.Src != asm.PseudoMapValue {
			continue
		}
		m := spec.Maps[addr.Reference()]
		if m == nil || !readOnly(m) {
			continue
		}
		if load.OpCode.Class() != asm.LdXClass || load.OpCode.Mode() != asm.MemMode ||
			load.Src != addr.Dst || load.Dst != addr.Dst || targets[offsets[i+1]] {
			continue
		}
		data, ok := sections[m.Name]
		if !ok {
			var err error
			if data, err = sectionBytes(spec, m); err != nil {
				return n, err
			}
			sections[m.Name] = data
		}
		off := int64(uint64(addr.Constant)>>32) + int64(load.Offset)
		size := int64(load.OpCode.Size().Sizeof())
		if off < 0 || off+size > int64(len(data)) {
			return n, fmt.Errorf("a %d-byte load at %d of %s, which holds %d bytes", size, off, m.Name, len(data))
		}
		var v uint64
		switch size {
		case 1:
			v = uint64(data[off])
		case 2:
			v = uint64(spec.ByteOrder.Uint16(data[off:]))
		case 4:
			v = uint64(spec.ByteOrder.Uint32(data[off:]))
		case 8:
			v = spec.ByteOrder.Uint64(data[off:])
		default:
			continue
		}
		imm := asm.LoadImm(addr.Dst, int64(v), asm.DWord)
		imm.Metadata = addr.Metadata // source line, symbol, function info
		insns[i] = imm.WithReference("")
		nop := asm.Mov.Reg(load.Dst, load.Dst)
		nop.Metadata = load.Metadata
		insns[i+1] = nop
		n++
	}
	return n, nil
}

// sectionBytes returns what m will hold once loaded: its contents with
// the variables set in it written over them, as cilium/ebpf writes them
// at load.
func sectionBytes(spec *ebpf.CollectionSpec, m *ebpf.MapSpec) ([]byte, error) {
	data, ok := m.Contents[0].Value.([]byte)
	if !ok {
		return nil, fmt.Errorf("%s holds %T, not bytes", m.Name, m.Contents[0].Value)
	}
	data = slices.Clone(data)
	for name, v := range spec.Variables {
		if v.SectionName != m.Name || v.Value == nil {
			continue
		}
		if int(v.Offset)+len(v.Value) > len(data) {
			return nil, fmt.Errorf("variable %s at %d (%d bytes) beyond %s's %d bytes", name, v.Offset, len(v.Value), m.Name, len(data))
		}
		copy(data[v.Offset:], v.Value)
	}
	return data, nil
}

// readOnly says whether m is a read-only global data section (.rodata,
// which cilium/ebpf freezes once it is written): one array element,
// bytes, that programs cannot write.
func readOnly(m *ebpf.MapSpec) bool {
	return strings.HasPrefix(m.Name, ".rodata") && m.Type == ebpf.Array && m.Flags&unix.BPF_F_RDONLY_PROG != 0 &&
		m.MaxEntries == 1 && len(m.Contents) == 1
}
