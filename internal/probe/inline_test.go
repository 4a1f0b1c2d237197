package probe

import (
	"slices"
	"testing"

	"github.com/cilium/ebpf/asm"

	"github.com/tokenwire/tokenwire/bpf"
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
	for name, v := range map[string]any{"watch_ports": ports, "n_watch_ports": uint8(2), "ports_in_map": uint8(0)} {
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

}
