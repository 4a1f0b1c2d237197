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
// rounded up to 32 bytes (kernel/bpf/verifier.c, check_max_stack_depth).
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
// and the chain that takes it, from the stack offsets each function uses.
func deepestChain(prog string, insns asm.Instructions) (int, string) {
	frames := map[string]int{}
	calls := map[string][]string{}
	fn := prog
	fromFP := map[asm.Register]bool{} // registers holding the frame pointer, copied
	for _, ins := range insns {
		if sym := ins.Symbol(); sym != "" {
			fn, fromFP = sym, map[asm.Register]bool{}
		}
		if ins.IsFunctionCall() {
			calls[fn] = append(calls[fn], ins.Reference())
		}
		depth := 0
		switch {
		case ins.OpCode.Class().IsLoad() || ins.OpCode.Class().IsStore():
			if (ins.Dst == asm.R10 || ins.Src == asm.R10) && ins.Offset < 0 {
				depth = -int(ins.Offset)
			}
		case ins.OpCode.Class().IsALU():
			switch {
			case ins.OpCode.ALUOp() == asm.Mov && ins.OpCode.Source() == asm.RegSource && ins.Src == asm.R10:
				fromFP[ins.Dst] = true
				continue
			case ins.OpCode.ALUOp() == asm.Add && ins.OpCode.Source() == asm.ImmSource && fromFP[ins.Dst] && ins.Constant < 0:
				depth = -int(ins.Constant) // a stack buffer's address, handed to a helper
			}
			delete(fromFP, ins.Dst)
		}
		frames[fn] = max(frames[fn], depth)
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
