package probe

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// TestInlineReadOnlyPortTest: the write program's first test, the
// watched ports, reads no .rodata once inlined: its first constant loads
// are the values set (no port map, two ports, 8000 first), and no load
// from .rodata is left before its first helper call. (The stream
// tracer inlines every program it loads: its tests load and run them.)
func TestInlineReadOnlyPortTest(t *testing.T) {
	spec, err := bpf.LoadStream()
	if err != nil {
		t.Fatal(err)
	}
	ports := [16]uint16{8000, 11434}
	var bounds [16]uint64
	for i := range bounds {
		bounds[i] = uint64(i+1) << 28 // the last ones wider than 32 bits
	}
	for name, v := range map[string]any{"watch_ports": ports, "n_watch_ports": uint8(2), "ports_in_map": uint8(0), "gap_bounds_ns": bounds} {
		if err := spec.Variables[name].Set(v); err != nil {
			t.Fatal(err)
		}
	}
	n, err := InlineReadOnly(spec)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no load inlined")
	}
	insns := spec.Programs["tw_st_sent_btf"].Instructions
	first := slices.IndexFunc(insns, func(ins asm.Instruction) bool { return ins.IsBuiltinCall() })
	if first < 0 {
		t.Fatal("tw_st_sent_btf calls no helper")
	}
	var consts []int64
	for i, ins := range insns[:first] {
		if ins.IsLoadFromMap() && ins.Src == asm.PseudoMapValue {
			t.Errorf("instruction %d still loads from %s: %v", i, ins.Reference(), ins)
		}
		if ins.IsConstantLoad(asm.DWord) {
			consts = append(consts, ins.Constant)
		}
	}
	if len(consts) < 3 || consts[0] != 0 || consts[1] != 2 || consts[2] != 8000 {
		t.Errorf("the port test's constants: %v, want 0 (no port map), 2 (ports), 8000 (the first) first", consts)
	}
	t.Logf("%d loads of read-only globals inlined across %d programs", n, len(spec.Programs))

	// A chunk reads no .rodata any more (the gap histogram's bounds
	// included): no global is read at a variable index (its address plus
	// a register), and what is still loaded from .rodata is a value too
	// wide for a one-slot immediate.
	f, err := flowOf(spec, insns)
	if err != nil {
		t.Fatal(err)
	}
	for i, ins := range insns {
		op := ins.OpCode
		if f.seen[i] && op.Class() == asm.ALU64Class && op.ALUOp() == asm.Add && op.Source() == asm.RegSource && f.in[i][ins.Dst].m != nil {
			t.Errorf("instruction %d indexes %s with a register: %v", i, f.in[i][ins.Dst].m.Name, ins)
		}
		if m, off := f.readOnlyLoad(insns, i); m != nil {
			data, err := sectionBytes(spec, m)
			if err != nil {
				t.Fatal(err)
			}
			if v := spec.ByteOrder.Uint64(data[off:]); ins.OpCode.Size() != asm.DWord || int64(v) == int64(int32(v)) {
				t.Errorf("instruction %d still loads %d from %s+%d: %v", i, v, m.Name, off, ins)
			}
		}
	}
}

// TestInlineReadOnlyAcrossBranches runs a hand-written socket filter on
// the kernel before and after inlining: a load through an address that
// reaches it on every path is inlined (past a jump and a join), one whose
// address differs by path is not, nor a 64-bit value too wide for a
// one-slot immediate; and both programs return the same on both paths.
func TestInlineReadOnlyAcrossBranches(t *testing.T) {
	bpftest.Require(t)
	data := make([]byte, 24)
	binary.LittleEndian.PutUint64(data[0:], 7)
	binary.LittleEndian.PutUint32(data[8:], 0x1234)
	binary.LittleEndian.PutUint64(data[16:], 1<<40)
	jump := func(ins asm.Instruction, off int16) asm.Instruction { ins.Offset = off; return ins }
	newSpec := func() *ebpf.CollectionSpec {
		return &ebpf.CollectionSpec{
			ByteOrder: binary.LittleEndian,
			Maps: map[string]*ebpf.MapSpec{".rodata": {Name: ".rodata", Type: ebpf.Array, KeySize: 4, ValueSize: uint32(len(data)),
				MaxEntries: 1, Flags: unix.BPF_F_RDONLY_PROG, Contents: []ebpf.MapKV{{Key: uint32(0), Value: data}}}},
			Programs: map[string]*ebpf.ProgramSpec{"f": {Name: "f", Type: ebpf.SocketFilter, License: "MIT", Instructions: asm.Instructions{
				asm.LoadMapValue(asm.R6, 0, 0).WithReference(".rodata").WithSymbol("f"), // slots 0-1
				asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),                                // 2: skb->len
				asm.LoadMem(asm.R0, asm.R6, 0, asm.DWord),                               // 3: 7
				jump(asm.JGT.Imm(asm.R2, 20, ""), 3),                                    // 4: to 8
				asm.LoadMapValue(asm.R7, 0, 16).WithReference(".rodata"),                // 5-6
				jump(asm.Ja.Imm(asm.R0, 0, ""), 2),                                      // 7: to 10
				asm.LoadMapValue(asm.R7, 0, 8).WithReference(".rodata"),                 // 8-9
				asm.LoadMem(asm.R3, asm.R6, 8, asm.Word),                                // 10: 0x1234 on both paths
				asm.Add.Reg(asm.R0, asm.R3),
				asm.LoadMem(asm.R4, asm.R7, 0, asm.Word), // 0 or 0x1234: by path
				asm.Add.Reg(asm.R0, asm.R4),
				asm.LoadMem(asm.R5, asm.R6, 16, asm.DWord), // 1<<40: too wide
				asm.RSh.Imm(asm.R5, 40),
				asm.Add.Reg(asm.R0, asm.R5),
				asm.Return(),
			}}},
		}
	}
	run := func(spec *ebpf.CollectionSpec, n int) uint32 {
		coll, err := ebpf.NewCollection(spec)
		if err != nil {
			t.Fatal(err)
		}
		defer coll.Close()
		ret, err := coll.Programs["f"].Run(&ebpf.RunOptions{Data: make([]byte, n)})
		if err != nil {
			t.Fatal(err)
		}
		return ret
	}
	inlined := newSpec()
	n, err := InlineReadOnly(inlined)
	if err != nil {
		t.Fatal(err)
	}
	insns := inlined.Programs["f"].Instructions
	for i, want := range map[int]string{2: "MovImm dst: r0 imm: 7", 7: "MovImm32 dst: r3 imm: 4660"} {
		if got := fmt.Sprint(insns[i]); got != want {
			t.Errorf("instruction %d: %s, want %s", i, got, want)
		}
	}
	for _, i := range []int{9, 11} {
		if insns[i].OpCode.Class() != asm.LdXClass {
			t.Errorf("instruction %d: %v, want the load left as it was", i, insns[i])
		}
	}
	if n != 2 {
		t.Errorf("%d loads inlined, want 2", n)
	}
	for _, size := range []int{14, 64} {
		want := uint32(7 + 0x1234 + 1)
		if size > 20 {
			want += 0x1234
		}
		if got, orig := run(inlined, size), run(newSpec(), size); got != want || orig != want {
			t.Errorf("a %d-byte packet: inlined program returned %#x, the original %#x, want %#x", size, got, orig, want)
		}
	}
}

// TestStripCmpXchg: every compare-and-exchange of the stream programs (the
// slots' claim) becomes "r0 = 1", and nothing else changes.
func TestStripCmpXchg(t *testing.T) {
	spec, err := bpf.LoadStream()
	if err != nil {
		t.Fatal(err)
	}
	isCmpXchg := func(ins asm.Instruction) bool {
		return ins.OpCode.Class() == asm.StXClass && ins.OpCode.Mode() == asm.AtomicMode && ins.OpCode.AtomicOp() == asm.CmpXchg
	}
	before := map[string]asm.Instructions{}
	want := 0
	for name, p := range spec.Programs {
		before[name] = slices.Clone(p.Instructions)
		for _, ins := range p.Instructions {
			if isCmpXchg(ins) {
				want++
			}
		}
	}
	if want == 0 {
		t.Fatal("the stream programs have no compare-and-exchange")
	}
	if n := StripCmpXchg(spec); n != want {
		t.Fatalf("rewrote %d, want %d", n, want)
	}
	for name, p := range spec.Programs {
		for i, ins := range p.Instructions {
			was := before[name][i]
			switch {
			case isCmpXchg(was):
				if ins.OpCode != asm.Mov.Op(asm.ImmSource) || ins.Dst != asm.R0 || ins.Constant != 1 {
					t.Errorf("%s[%d]: %v, want r0 = 1", name, i, ins)
				}
			case ins.OpCode != was.OpCode || ins.Dst != was.Dst || ins.Src != was.Src ||
				ins.Offset != was.Offset || ins.Constant != was.Constant:
				t.Errorf("%s[%d]: %v became %v", name, i, was, ins)
			}
		}
	}
}
