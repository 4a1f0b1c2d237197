package probe

import (
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// HaveAtomics reports whether the kernel's verifier takes BPF's atomic
// compare-and-exchange (Linux 5.12+), by loading a socket filter that
// does one on its stack. Programs that claim a shared slot with it keep
// the instruction in a branch a .rodata flag turns off elsewhere, and must
// lose it before load where it is refused (StripCmpXchg).
var HaveAtomics = sync.OnceValue(func() bool {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.SocketFilter,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R3, 0),
			asm.StoreMem(asm.RFP, -8, asm.R3, asm.DWord),
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, -8),
			asm.Mov.Imm(asm.R2, 1),
			asm.Mov.Imm(asm.R0, 0),
			// The immediate names the operation, as in an object file:
			// cilium/ebpf takes it from Constant, and without it the
			// instruction would be an atomic add, which 5.10 takes.
			{OpCode: asm.CmpXchg.OpCode(asm.DWord), Dst: asm.R1, Src: asm.R2, Constant: int64(asm.CmpXchg >> 8)},
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		return false
	}
	prog.Close()
	return true
})

// StripCmpXchg rewrites every atomic compare-and-exchange in spec's
// programs into "r0 = 1", and returns how many it rewrote. It is for
// kernels without BPF atomics, whose verifier refuses the instruction
// wherever it stands, in code that a .rodata flag rules out included
// (before Linux 5.12 any BPF_STX but a plain store or an add "uses
// reserved fields"). The instruction leaves the old value in r0; 1 is no
// socket's address, so a program that claims a slot with it reads "held by
// another" and goes its other way: even where the rewritten code runs, the
// program stays correct, without the slot.
func StripCmpXchg(spec *ebpf.CollectionSpec) int {
	n := 0
	for _, prog := range spec.Programs {
		for i := range prog.Instructions {
			ins := &prog.Instructions[i]
			if ins.OpCode.Class() != asm.StXClass || ins.OpCode.Mode() != asm.AtomicMode ||
				ins.OpCode.AtomicOp() != asm.CmpXchg {
				continue
			}
			mov := asm.Mov.Imm(asm.R0, 1)
			ins.OpCode, ins.Dst, ins.Src, ins.Offset, ins.Constant = mov.OpCode, mov.Dst, mov.Src, mov.Offset, mov.Constant
			n++
		}
	}
	return n
}
