package probe

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf/btf"
)

// kernelBTFIdle is how long the decoded kernel BTF is kept after its last
// use (a variable for the tests).
var kernelBTFIdle = 30 * time.Second

// kernelBTF holds the running kernel's BTF, decoded once for the type
// lookups and program loads that come together: a receiver's start, a
// /proc scan's TLS probes, a test binary's tracers. Decoding vmlinux's
// BTF costs about 0.3 s of CPU on a 2-core cloud VM, and without a shared
// cache each program load with CO-RE relocations decodes it again; the
// decoded types take tens of MiB, so they are let go once unused.
var kernelBTF struct {
	mu       sync.Mutex
	cache    *btf.Cache
	lastUsed time.Time
	drop     *time.Timer // the cache's: it lets go of it once idle
}

// KernelBTF returns the process's shared cache of the kernel's BTF, for
// type lookups and for ebpf.CollectionOptions.Cache. The process lets go
// of it kernelBTFIdle after the last call; a caller may keep using what
// it got.
func KernelBTF() *btf.Cache {
	kernelBTF.mu.Lock()
	defer kernelBTF.mu.Unlock()
	kernelBTF.lastUsed = time.Now()
	if kernelBTF.cache == nil {
		c := btf.NewCache()
		kernelBTF.cache = c
		kernelBTF.drop = time.AfterFunc(kernelBTFIdle, func() {
			kernelBTF.mu.Lock()
			defer kernelBTF.mu.Unlock()
			if kernelBTF.cache != c {
				return
			}
			if left := kernelBTFIdle - time.Since(kernelBTF.lastUsed); left > 0 {
				kernelBTF.drop.Reset(left)
				return
			}
			kernelBTF.cache = nil
		})
	}
	return kernelBTF.cache
}

// KernelType returns the type called name, of T's kind (*btf.Func,
// *btf.Struct, *btf.Typedef, ...), from the running kernel's BTF. The
// type is shared: callers read it and do not change it. The error wraps
// btf.ErrNotFound when the kernel has no such type, and says so when the
// kernel's BTF cannot be read.
func KernelType[T btf.Type](name string) (T, error) {
	var typ T
	kernel, err := KernelBTF().Kernel()
	KernelBTF() // in use until the decoding, which can take seconds, is done
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
