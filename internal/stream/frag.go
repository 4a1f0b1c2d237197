package stream

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/internal/probe"
)

// DirectMapBase returns bpf/stream_frag.h's frag_va_base: the direct-map
// address of the page a struct page describes is this base + 64 * the
// struct's address. With it the programs read a write's last bytes from
// the kernel's copy of them instead of the writer's memory. It is found
// once per process, by tracing one large kernel allocation
// (calibrateFrag); the error says why not, and the programs then read the
// writer's memory. bench/kcost sets its parts' frag_va_base with it.
var DirectMapBase = sync.OnceValues(calibrateFrag)

// pageStructSize is the size of struct page that stream_frag.h's
// address arithmetic assumes.
const pageStructSize = 64

func calibrateFrag() (uint64, error) {
	if !RegsByCast() {
		return 0, errors.New("the kernel lacks bpf_rdonly_cast (Linux 6.2+)")
	}
	page, err := probe.KernelType[*btf.Struct]("page")
	if err != nil {
		return 0, err
	}
	if page.Size != pageStructSize {
		return 0, fmt.Errorf("struct page is %d bytes, not %d", page.Size, pageStructSize)
	}
	spec, err := bpf.LoadStream()
	if err != nil {
		return 0, err
	}
	type result struct {
		base uint64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// The programs look at one thread's copies: this goroutine's,
		// which keeps the thread until it returns and the thread exits.
		runtime.LockOSThread()
		base, err := traceAllocation(spec, unix.Gettid())
		done <- result{base, err}
	}()
	r := <-done
	return r.base, r.err
}

// traceAllocation attaches the calibration programs for thread tid,
// makes the kernel allocate a pipe's buffer ring of more than two pages
// from it, and returns the base the programs found.
func traceAllocation(spec *ebpf.CollectionSpec, tid int) (uint64, error) {
	if err := spec.Variables["frag_calib_tid"].Set(uint32(tid)); err != nil {
		return 0, err
	}
	var objs struct {
		Page    *ebpf.Program `ebpf:"tw_st_frag_page"`
		Kmalloc *ebpf.Program `ebpf:"tw_st_frag_kmalloc"`
		Found   *ebpf.Map     `ebpf:"tw_st_frag_base"`
	}
	if err := spec.LoadAndAssign(&objs, &ebpf.CollectionOptions{Cache: probe.KernelBTF()}); err != nil {
		return 0, fmt.Errorf("loading the calibration programs: %w", err)
	}
	defer objs.Page.Close()
	defer objs.Kmalloc.Close()
	defer objs.Found.Close()
	for tp, p := range map[string]*ebpf.Program{"mm_page_alloc": objs.Page, "kmalloc": objs.Kmalloc} {
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: p})
		if err != nil {
			return 0, fmt.Errorf("attaching the calibration programs: %w", err)
		}
		defer l.Close()
	}
	// An interrupt that allocates a page on this thread between the
	// allocation's two tracepoints spoils one try (the pair then gives
	// no 1 GiB aligned base); another try is another pipe.
	for range calibrationTries {
		if err := largeAllocation(); err != nil {
			return 0, err
		}
		var found struct{ Page, Order, Base uint64 }
		if err := objs.Found.Lookup(uint32(0), &found); err != nil {
			return 0, fmt.Errorf("reading the calibration: %w", err)
		}
		if found.Base != 0 {
			return found.Base, nil
		}
	}
	return 0, fmt.Errorf("no large allocation's pages and address were seen in %d tries", calibrationTries)
}

// calibrationTries bounds the large allocations the calibration makes.
const calibrationTries = 3

// largeAllocation makes the kernel kmalloc more than two pages (8 KiB,
// the largest size its slab caches serve) from the calling thread: a
// pipe's ring of 256 buffers for 1 MiB.
func largeAllocation() error {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("making a pipe: %w", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	if _, err := unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, 1<<20); err != nil {
		return fmt.Errorf("growing a pipe to 1 MiB: %w", err)
	}
	return nil
}
