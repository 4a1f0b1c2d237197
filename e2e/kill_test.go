//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// testKill: a collector killed with SIGKILL mid-stream leaves nothing of
// its own in the kernel, and the next one measures the next streams
// exactly.
func testKill(t *testing.T, dir string, f *figures) {
	srv := streamServer(t)
	long := teststack.ServeHTTP(t, &teststack.SSEServer{Think: 5 * time.Millisecond, Interval: 50 * time.Millisecond,
		Events: 100, HeadersFirst: true, Done: teststack.DoneFlushed})
	receiver := fmt.Sprintf(`collection_interval: 500ms
handshake:
  enabled: false
streams:
  ports: [%d, %d]
  flush_interval: 100ms`, srv.Port, long.Port)
	first := startCollector(t, dir, "killed", receiver)
	var wg sync.WaitGroup
	wg.Go(func() { runStreams(t, long.URL, 0, 10, 10) }) // 5 s each, across the kill and the restart
	time.Sleep(time.Second)
	held := heldBPFObjects(t, first.proc.Pid())
	if len(held) < 10 {
		t.Fatalf("the collector holds %d BPF objects (%v): want its programs, maps and links", len(held), held)
	}
	if err := syscall9(first.proc.Pid()); err != nil {
		t.Fatal(err)
	}
	first.proc.Wait(10 * time.Second)
	var left []string
	waitFor(t, 5*time.Second, func() error {
		left = stillInKernel(t, held)
		if len(left) > 0 {
			return fmt.Errorf("left in the kernel after SIGKILL: %v", left)
		}
		return nil
	})
	second := startCollector(t, dir, "restarted", receiver)
	clients := runStreams(t, srv.URL, 1000, 10, 10)
	spansOnPort(t, second, srv.Port, 10, clients)
	waitFor(t, 10*time.Second, func() error {
		m, err := scrape(second.metricsURL)
		if err != nil {
			return err
		}
		if got := m.sum("tokenwire_stream_chunks_total", fmt.Sprintf(`server_port="%d"`, srv.Port)); got != 10*relEvents {
			return fmt.Errorf("chunks after the restart %v, want %d", got, 10*relEvents)
		}
		return nil
	})
	wg.Wait()
	f.add(t, "kill -9: programs, maps and links the collector held / left after SIGKILL", fmt.Sprintf("%d / %d", len(held), len(left)))
	f.add(t, "kill -9: streams and chunks measured after the restart (want)", fmt.Sprintf("10, %d (10, %d)", 10*relEvents, 10*relEvents))
}

func syscall9(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// heldBPFObjects lists the programs, maps and links a process holds file
// descriptors for, from its fdinfo: the objects that are the collector's
// own, whatever else runs on the machine.
func heldBPFObjects(t *testing.T, pid int) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue // closed since the listing
		}
		for _, line := range strings.Split(string(b), "\n") {
			kind, id, ok := strings.Cut(line, "_id:")
			if !ok || (kind != "prog" && kind != "map" && kind != "link") {
				continue
			}
			if obj := kind + " " + strings.TrimSpace(id); !seen[obj] {
				seen[obj] = true
				out = append(out, obj)
			}
		}
	}
	return out
}

// stillInKernel returns the objects of held ("prog 12", "map 7") the kernel
// still has.
func stillInKernel(t *testing.T, held []string) []string {
	t.Helper()
	var left []string
	for _, obj := range held {
		kind, id, _ := strings.Cut(obj, " ")
		if exec.Command("bpftool", kind, "show", "id", id).Run() == nil {
			left = append(left, obj)
		}
	}
	return left
}
