package probe

import (
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// TestKernelBTFIsSharedThenDropped checks that lookups share one decoded
// copy of the kernel's BTF while it is in use, and that it is let go once
// unused.
func TestKernelBTFIsSharedThenDropped(t *testing.T) {
	bpftest.Require(t)
	idle := kernelBTFIdle
	kernelBTF.mu.Lock()
	kernelBTF.cache = nil // afresh, with the default idle time
	kernelBTF.mu.Unlock()
	t.Cleanup(func() {
		kernelBTF.mu.Lock()
		defer kernelBTF.mu.Unlock()
		kernelBTFIdle = idle
	})

	first := KernelBTF()
	a, err := KernelType[*btf.Func]("tcp_sendmsg")
	if err != nil {
		t.Fatal(err)
	}
	b, err := KernelType[*btf.Func]("tcp_sendmsg")
	if err != nil {
		t.Fatal(err)
	}
	if a != b || KernelBTF() != first {
		t.Fatalf("two lookups decoded the kernel's BTF twice (types %p and %p)", a, b)
	}
	// Once idle for a short time now: the timer is made to look again.
	kernelBTF.mu.Lock()
	kernelBTFIdle = 200 * time.Millisecond
	kernelBTF.drop.Reset(0)
	kernelBTF.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		kernelBTF.mu.Lock()
		held := kernelBTF.cache == first
		kernelBTF.mu.Unlock()
		if !held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel BTF still held 10 s after its last use (idle time %v)", kernelBTFIdle)
		}
	}
	if KernelBTF() == first {
		t.Fatal("the dropped cache came back")
	}
}
