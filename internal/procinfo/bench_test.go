package procinfo

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// helperThreadsEnv makes the test binary a process with that many threads
// that waits to be killed, for BenchmarkLookup.
const helperThreadsEnv = "PROCINFO_TEST_HELPER_THREADS"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(helperThreadsEnv)); err == nil {
		for range n {
			go func() {
				runtime.LockOSThread() // one thread each
				for {
					time.Sleep(time.Hour)
				}
			}()
		}
		for {
			time.Sleep(time.Hour)
		}
	}
	os.Exit(m.Run())
}

// BenchmarkLookup measures a lookup of a cached process, which costs the
// reading of /proc/<pid>/stat, and for comparison that reading alone. The
// kernel sums the times of every thread into /proc/<pid>/stat, so the
// target's thread count matters.
func BenchmarkLookup(b *testing.B) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		b.Skip(err)
	}
	one := exec.Command(sleep, "600")
	many := exec.Command(os.Args[0], "-test.run=^$")
	many.Env = append(os.Environ(), helperThreadsEnv+"=200")
	for _, cmd := range []*exec.Cmd{one, many} {
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	// Let the helper start its threads.
	for deadline := time.Now().Add(5 * time.Second); ; {
		status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", many.Process.Pid))
		if bytes.Contains(status, []byte("\nThreads:\t20")) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the helper did not start 200 threads: %s", status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	targets := []struct {
		name string
		pid  int
	}{
		{"1-thread", one.Process.Pid},
		{"200-threads", many.Process.Pid},
	}
	for _, tg := range targets {
		b.Run("hit/"+tg.name, func(b *testing.B) {
			c := NewCache(16)
			pid := uint32(tg.pid)
			want := c.Lookup(pid, "x")
			for b.Loop() {
				if got := c.Lookup(pid, "x"); got != want {
					b.Fatalf("%+v, want %+v", got, want)
				}
			}
		})
		b.Run("stat/"+tg.name, func(b *testing.B) {
			c := NewCache(16)
			for b.Loop() {
				if _, err := c.identify(uint32(tg.pid)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("miss/"+tg.name, func(b *testing.B) {
			pid := uint32(tg.pid)
			for b.Loop() {
				c := NewCache(16)
				c.Lookup(pid, "x")
			}
		})
	}
	// One cheap system call, for scale: hit costs about four of them.
	b.Run("getppid", func(b *testing.B) {
		for b.Loop() {
			unix.Getppid()
		}
	})
	b.Run("gone", func(b *testing.B) {
		c := NewCache(16)
		for b.Loop() {
			c.Lookup(1<<30, "x")
		}
	})
}
