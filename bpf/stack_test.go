package bpf

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// maxCombinedStack is what the verifier allows a program and the
// functions it calls to take of the stack together, each function's part
// rounded up to 32 bytes (kernel/bpf/verifier.c, check_max_stack_depth;
// newer kernels round JITed programs' to 16: 32 is the bound for all).
const maxCombinedStack = 512

// Every program's deepest chain of calls fits the verifier's 512 bytes of
// stack. The kernel checks it at load, and only for the programs a kernel
// loads: this machine loads the tp_btf programs, the kernel matrix's 5.10
// and 6.1 the fentry ones, which take other call chains. Read from the
// objects here, so that a chain grown past the limit fails on any kernel.
func TestCallChainsFitTheStack(t *testing.T) {
	for name, load := range map[string]func() (*ebpf.CollectionSpec, error){
		"stream": LoadStream, "handshake": LoadHandshake, "xdpfilter": LoadXdpFilter,
	} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		deepest := 0
		for _, p := range spec.Programs {
			depth, chain := deepestChain(p.Name, p.Instructions)
			deepest = max(deepest, depth)
			if depth > maxCombinedStack {
				t.Errorf("%s/%s: %d bytes of stack over its calls %s, over the verifier's %d", name, p.Name, depth, chain, maxCombinedStack)
			}
		}
		t.Logf("%s: deepest chain %d bytes of %d", name, deepest, maxCombinedStack)
	}
}

// deepestChain returns the most stack a program's calls can take together,
// and the chain that takes it, from the stack offsets each function uses:
// through the frame pointer, and through registers that straight-line code
// set from it (a pointer spilled to the stack and loaded back is not
// followed; the compiler keeps stack addresses in registers).
func deepestChain(prog string, insns asm.Instructions) (int, string) {
	frames := map[string]int{}
	calls := map[string][]string{}
	fn := prog
	// fp holds the registers that point into the stack, with their offset
	// from the frame pointer, as straight-line code copies and moves them.
	fp := map[asm.Register]int64{asm.R10: 0}
	for _, ins := range insns {
		if sym := ins.Symbol(); sym != "" {
			fn, fp = sym, map[asm.Register]int64{asm.R10: 0}
		}
		if ins.IsFunctionCall() {
			calls[fn] = append(calls[fn], ins.Reference())
		}
		depth := int64(0)
		op := ins.OpCode
		switch {
		case op.Class().IsStore():
			if off, ok := fp[ins.Dst]; ok {
				depth = -(off + int64(ins.Offset))
			}
		case op.Class().IsLoad():
			if off, ok := fp[ins.Src]; ok {
				depth = -(off + int64(ins.Offset))
			}
			delete(fp, ins.Dst)
		case op.Class().IsALU() && ins.Dst != asm.R10:
			off, ok := fp[ins.Dst]
			switch {
			case op.ALUOp() == asm.Mov && op.Source() == asm.RegSource:
				if src, isFP := fp[ins.Src]; isFP {
					fp[ins.Dst] = src
					continue
				}
			case op.ALUOp() == asm.Add && op.Source() == asm.ImmSource && ok:
				fp[ins.Dst] = off + ins.Constant
				depth = -(off + ins.Constant) // a stack buffer's address, handed to a helper
				frames[fn] = max(frames[fn], int(depth))
				continue
			}
			delete(fp, ins.Dst)
		case op.JumpOp() == asm.Call:
			for r := asm.R0; r <= asm.R5; r++ {
				delete(fp, r)
			}
		}
		frames[fn] = max(frames[fn], int(depth))
	}
	var walk func(f string, seen []string) (int, []string)
	walk = func(f string, seen []string) (int, []string) {
		seen = append(slices.Clip(seen), fmt.Sprintf("%s(%d)", f, frames[f]))
		best, chain := 0, seen
		for _, c := range calls[f] {
			if d, ch := walk(c, seen); d > best {
				best, chain = d, ch
			}
		}
		return (max(frames[f], 1)+31)/32*32 + best, chain
	}
	depth, chain := walk(prog, nil)
	return depth, strings.Join(chain, " > ")
}
