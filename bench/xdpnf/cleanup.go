package main

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// children are the processes we started and have not reaped: a signal
// kills them before the namespaces go.
var children struct {
	sync.Mutex
	m map[*exec.Cmd]bool
}

func track(c *exec.Cmd, alive bool) {
	children.Lock()
	defer children.Unlock()
	if children.m == nil {
		children.m = map[*exec.Cmd]bool{}
	}
	if alive {
		children.m[c] = true
	} else {
		delete(children.m, c)
	}
}

var cleanupOnce sync.Once

// cleanup ends our children (by pid) and deletes our namespaces, which
// removes the veth pair, every rule and every program attached to it.
func cleanup() {
	cleanupOnce.Do(func() {
		children.Lock()
		var procs []*os.Process
		for c := range children.m {
			if c.Process != nil {
				c.Process.Kill()
				procs = append(procs, c.Process)
			}
		}
		children.Unlock()
		// Reap them (bounded), so none is left as a zombie when we exit;
		// the goroutine that started one may be waiting for it too, and
		// one of the two Waits then just fails.
		done := make(chan struct{})
		go func() {
			for _, p := range procs {
				p.Wait()
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		teardown()
		restoreBPFStats()
	})
}

// bpfStatsWas is kernel.bpf_stats_enabled before -bpf-stats turned it on
// ("" when untouched).
var bpfStatsWas string

// enableBPFStats makes the kernel time every BPF program run, for the
// XDP programs' own run time; cleanup restores the previous setting.
func enableBPFStats() error {
	b, err := os.ReadFile(benchutil.BPFStatsSysctl)
	if err != nil {
		return err
	}
	bpfStatsWas = strings.TrimSpace(string(b))
	return os.WriteFile(benchutil.BPFStatsSysctl, []byte("1"), 0o644)
}

func restoreBPFStats() {
	if bpfStatsWas != "" {
		os.WriteFile(benchutil.BPFStatsSysctl, []byte(bpfStatsWas), 0o644)
	}
}
