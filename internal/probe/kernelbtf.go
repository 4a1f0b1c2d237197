package probe

import (
	"fmt"

	"github.com/cilium/ebpf/btf"
)

// KernelType returns the type called name, of T's kind (*btf.Func,
// *btf.Struct, *btf.Typedef, ...), from the running kernel's BTF. The
// error wraps btf.ErrNotFound when the kernel has no such type, and says
// so when the kernel's BTF cannot be read.
func KernelType[T btf.Type](name string) (T, error) {
	var typ T
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return typ, fmt.Errorf("reading kernel BTF: %w", err)
	}
	if err := kernel.TypeByName(name, &typ); err != nil {
		return typ, fmt.Errorf("%s in kernel BTF: %w", name, err)
	}
	return typ, nil
}

// HaveKfunc reports whether the running kernel's BTF has the function
// name, which a program may then call as a kfunc.
func HaveKfunc(name string) bool {
	_, err := KernelType[*btf.Func](name)
	return err == nil
}
