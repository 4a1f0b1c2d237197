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
// A forward pass over each program's control flow finds, before every
// instruction, the registers that hold an address in a read-only section
// on every path that reaches it. A load through such a register becomes
// an immediate, instruction for instruction, so that no jump moves:
//   - a load into the register that held the address, just after the
//     address was loaded (and no jump lands between), takes both slots: a
//     64-bit immediate, then a no-op (r = r);
//   - any other load whose value fits a one-slot immediate (32 bits,
//     sign-extended for a 64-bit load) becomes a move of that immediate;
//     the address stays in its register for the loads that still need it.
//
// Loads at a variable index (the address plus a register) are left as
// they are. It returns the number of loads inlined.
func InlineReadOnly(spec *ebpf.CollectionSpec) (int, error) {
	total := 0
	sections := map[string][]byte{}
	for name, prog := range spec.Programs {
		n, err := inlineProgram(spec, sections, prog.Instructions)
		if err != nil {
			return total, fmt.Errorf("inlining read-only globals in %s: %w", name, err)
		}
		total += n
	}
	return total, nil
}

// roAddr is what a register holds before an instruction, as far as the
// pass knows: an address in read-only section m at off, or nothing known.
type roAddr struct {
	m   *ebpf.MapSpec
	off int64
}

// regFile is roAddr for r0-r10.
type regFile [asm.R10 + 1]roAddr

// meet keeps what both paths agree on.
func (r *regFile) meet(o *regFile) bool {
	changed := false
	for i := range r {
		if r[i] != o[i] && r[i].m != nil {
			r[i] = roAddr{}
			changed = true
		}
	}
	return changed
}

func (r *regFile) clobberCall() {
	for reg := asm.R0; reg <= asm.R5; reg++ {
		r[reg] = roAddr{}
	}
}

// step is what ins leaves in the registers.
func (r regFile) step(spec *ebpf.CollectionSpec, ins *asm.Instruction) regFile {
	op := ins.OpCode
	switch class := op.Class(); {
	case ins.IsLoadFromMap():
		r[ins.Dst] = roAddr{}
		if m := spec.Maps[ins.Reference()]; ins.Src == asm.PseudoMapValue && m != nil && readOnly(m) {
			r[ins.Dst] = roAddr{m: m, off: int64(uint64(ins.Constant) >> 32)}
		}
	case class == asm.LdClass:
		if op.Mode() == asm.ImmMode {
			r[ins.Dst] = roAddr{}
		} else { // legacy packet loads: r0 and the call registers
			r.clobberCall()
		}
	case class == asm.LdXClass:
		r[ins.Dst] = roAddr{}
	case class == asm.StXClass:
		if op.Mode() == asm.AtomicMode { // fetching atomics write src or r0
			r[ins.Src], r[asm.R0] = roAddr{}, roAddr{}
		}
	case class == asm.ALU64Class:
		src := r[ins.Src]
		switch {
		case op.ALUOp() == asm.Mov && op.Source() == asm.RegSource && ins.Offset == 0:
			r[ins.Dst] = src
		case op.ALUOp() == asm.Add && op.Source() == asm.ImmSource && r[ins.Dst].m != nil:
			r[ins.Dst].off += ins.Constant
		case op.ALUOp() == asm.Sub && op.Source() == asm.ImmSource && r[ins.Dst].m != nil:
			r[ins.Dst].off -= ins.Constant
		default:
			r[ins.Dst] = roAddr{}
		}
	case class == asm.ALUClass:
		r[ins.Dst] = roAddr{}
	case class.IsJump() && op.JumpOp() == asm.Call:
		r.clobberCall()
	}
	return r
}

// roFlow is what a forward pass over a program found: before each
// instruction it reaches (seen), what the registers hold (in); and which
// instructions a jump lands on.
type roFlow struct {
	in           []regFile
	seen, landed []bool
}

func flowOf(spec *ebpf.CollectionSpec, insns asm.Instructions) (*roFlow, error) {
	// Each instruction's raw slot, and where jumps land.
	offsets := make([]asm.RawInstructionOffset, len(insns))
	index := map[asm.RawInstructionOffset]int{}
	for it := insns.Iterate(); it.Next(); {
		offsets[it.Index] = it.Offset
		index[it.Offset] = it.Index
	}
	target := func(i int) (int, bool) {
		ins := insns[i]
		rel := int64(ins.Offset)
		if ins.OpCode.Class() == asm.Jump32Class && ins.OpCode.JumpOp() == asm.Ja {
			rel = ins.Constant // gotol: the offset is the immediate
		}
		t, ok := index[asm.RawInstructionOffset(int64(offsets[i])+1+rel)]
		return t, ok
	}
	f := &roFlow{in: make([]regFile, len(insns)), seen: make([]bool, len(insns)), landed: make([]bool, len(insns))}
	type edge struct{ next, jump int }
	flows := make([]edge, len(insns))
	for i, ins := range insns {
		e := edge{next: i + 1, jump: -1}
		if op := ins.OpCode; op.Class().IsJump() {
			switch op.JumpOp() {
			case asm.Exit:
				e.next = -1
			case asm.Call:
			default:
				t, ok := target(i)
				if !ok {
					return nil, fmt.Errorf("instruction %d jumps between instructions", i)
				}
				e.jump = t
				f.landed[t] = true
				if op.JumpOp() == asm.Ja {
					e.next = -1
				}
			}
		}
		if e.next >= len(insns) {
			e.next = -1
		}
		flows[i] = e
	}

	// A function's first instruction (the program's, or a subprogram's)
	// knows nothing.
	var work []int
	reach := func(i int, r *regFile) {
		if i < 0 || insns[i].Symbol() != "" && f.seen[i] {
			return
		}
		if !f.seen[i] {
			f.seen[i], f.in[i] = true, *r
			work = append(work, i)
		} else if f.in[i].meet(r) {
			work = append(work, i)
		}
	}
	for i, ins := range insns {
		if i == 0 || ins.Symbol() != "" {
			reach(i, &regFile{})
		}
	}
	for len(work) > 0 {
		i := work[len(work)-1]
		work = work[:len(work)-1]
		out := f.in[i].step(spec, &insns[i])
		reach(flows[i].next, &out)
		reach(flows[i].jump, &out)
	}
	return f, nil
}

// readOnlyLoad is the read-only section and offset that the load at i
// reads, when the pass knows it; nil for any other instruction.
func (f *roFlow) readOnlyLoad(insns asm.Instructions, i int) (*ebpf.MapSpec, int64) {
	load := insns[i]
	if !f.seen[i] || load.OpCode.Class() != asm.LdXClass || load.OpCode.Mode() != asm.MemMode {
		return nil, 0
	}
	a := f.in[i][load.Src]
	return a.m, a.off + int64(load.Offset)
}

func inlineProgram(spec *ebpf.CollectionSpec, sections map[string][]byte, insns asm.Instructions) (int, error) {
	f, err := flowOf(spec, insns)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range insns {
		load := insns[i]
		m, off := f.readOnlyLoad(insns, i)
		if m == nil {
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
		if addr := insns[max(i-1, 0)]; i > 0 && addr.IsLoadFromMap() && addr.Dst == load.Src && load.Dst == load.Src &&
			!f.landed[i] {
			imm := asm.LoadImm(load.Dst, int64(v), asm.DWord)
			imm.Metadata = addr.Metadata // source line, symbol, function info
			insns[i-1] = imm.WithReference("")
			nop := asm.Mov.Reg(load.Dst, load.Dst)
			nop.Metadata = load.Metadata
			insns[i] = nop
			n++
			continue
		}
		var mov asm.Instruction
		switch {
		case size < 8:
			mov = asm.Mov.Imm32(load.Dst, int32(uint32(v))) // zero-extends, as the load does
		case int64(v) == int64(int32(v)):
			mov = asm.Mov.Imm(load.Dst, int32(v)) // sign-extends
		default:
			continue
		}
		mov.Metadata = load.Metadata
		insns[i] = mov
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
