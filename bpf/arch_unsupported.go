//go:build !(linux && amd64)

package bpf

// tokenwire's BPF objects are compiled for x86-64 (bpf2go -target amd64)
// and read x86-64 syscall frames (syscall_io.h: syscall numbers and the
// pt_regs layout). Building for another platform stops here, naming why,
// rather than failing later on missing bindings. Supporting arm64 means a
// second bpf2go target and arm64 syscall numbers and registers in
// syscall_io.h.
var _ = tokenwire_builds_for_linux_amd64_only
