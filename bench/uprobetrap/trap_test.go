package uprobetrap

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

var sink int

// BenchmarkUprobeTrap times a call of a four-instruction function (ns/op)
// with nothing attached, with an empty entry uprobe on its first
// instruction, and with an empty return uprobe, once on a function whose
// first instruction the kernel emulates and once on one it single-steps.
// make bench runs it as root; anything that keeps it from attaching fails
// it.
func BenchmarkUprobeTrap(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	sa, ea := addrs()
	offsets := map[string]uint64{
		"stepped":  fileOffset(b, sa, []byte{0x48, 0x8b}), // MOVQ from the stack
		"emulated": fileOffset(b, ea, []byte{0x76, 0x00}), // JLS (JBE) to the next instruction
	}
	ex, err := link.OpenExecutable(exe)
	if err != nil {
		b.Fatal(err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.Kprobe, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	fns := map[string]func(int) int{"stepped": stepped, "emulated": emulated}
	type attachFunc func(symbol string, prog *ebpf.Program, opts *link.UprobeOptions) (link.Link, error)
	for _, c := range []struct {
		name, fn string
		attach   attachFunc
	}{
		{"none", "stepped", nil},
		{"entry/emulated", "emulated", ex.Uprobe},
		{"entry/stepped", "stepped", ex.Uprobe},
		{"return/emulated", "emulated", ex.Uretprobe},
		{"return/stepped", "stepped", ex.Uretprobe},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.attach != nil {
				l, err := c.attach(c.fn, prog, &link.UprobeOptions{Address: offsets[c.fn]})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
			}
			fn := fns[c.fn]
			b.ResetTimer()
			for i := range b.N {
				sink += fn(i)
			}
		})
	}
}

// fileOffset checks that the code at code, in this process's executable,
// begins with the bytes given (the instruction kind the benchmark names)
// and returns its offset in the file, where a uprobe goes.
func fileOffset(tb testing.TB, code unsafe.Pointer, want []byte) uint64 {
	tb.Helper()
	addr := uintptr(code)
	if got := unsafe.Slice((*byte)(code), len(want)); !bytes.Equal(got, want) {
		tb.Fatalf("the function at %#x begins with % x, not % x", addr, got, want)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		var start, end, off uint64
		var perms string
		if _, err := fmt.Sscanf(line, "%x-%x %s %x", &start, &end, &perms, &off); err != nil {
			continue
		}
		if uint64(addr) >= start && uint64(addr) < end && strings.Contains(perms, "x") {
			return uint64(addr) - start + off
		}
	}
	tb.Fatalf("no executable mapping holds %#x", addr)
	return 0
}
