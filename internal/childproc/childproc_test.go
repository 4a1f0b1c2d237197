package childproc

import (
	"errors"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	// The main goroutine keeps the main thread, which the runtime wedges
	// rather than ends: the goroutines these tests lock to their threads
	// are on other threads, which end when they return.
	runtime.LockOSThread()
}

// startFromEndingThread starts "sleep 30" with a parent-death SIGKILL from
// a goroutine locked to its thread, lets that goroutine return (the
// runtime then ends its thread), and waits until the thread is gone.
func startFromEndingThread(t *testing.T, start func(*exec.Cmd) error) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	tidc := make(chan int, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends when we return
		tidc <- unix.Gettid()
		errc <- start(cmd)
	}()
	tid := <-tidc
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	task := "/proc/self/task/" + strconv.Itoa(tid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(task); errors.Is(err, os.ErrNotExist) {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not end after its locked goroutine returned", tid)
		}
	}
}

// exited waits at most d for cmd to exit and returns how, or nil and
// false if it is still running.
func exited(cmd *exec.Cmd, d time.Duration) (error, bool) {
	done := make(chan struct{})
	var err error
	go func() {
		err = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// TestChildOutlivesTheStartersThread: a child started with Start lives on
// when the thread of the goroutine that asked for it ends. The control
// shows the hazard it avoids: the same child started with cmd.Start on
// that thread is killed when the thread ends.
func TestChildOutlivesTheStartersThread(t *testing.T) {
	t.Run("control", func(t *testing.T) {
		cmd := startFromEndingThread(t, (*exec.Cmd).Start)
		err, done := exited(cmd, 5*time.Second)
		if !done {
			t.Fatal("a child forked on a thread that ended is still running: the kernel did not send its parent-death signal")
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child ended with %v, want its parent-death SIGKILL", err)
		}
	})
	t.Run("Start", func(t *testing.T) {
		cmd := startFromEndingThread(t, Start)
		// The signal is sent as the thread ends, which has happened: a
		// child that got it is gone well within this bound.
		if err, done := exited(cmd, time.Second); done {
			t.Fatalf("child ended with the thread of the goroutine that started it: %v", err)
		}
	})
}

// TestForkLoopIsItsName: leak checkers are told to ignore forkLoopName,
// which must name the function the forking goroutine runs, and the
// receiver's goleak check must be told that name.
func TestForkLoopIsItsName(t *testing.T) {
	if got := runtime.FuncForPC(reflect.ValueOf(forkLoop).Pointer()).Name(); got != forkLoopName {
		t.Fatalf("forkLoopName is %q, the function is %q", forkLoopName, got)
	}
	const metadata = "../../receiver/tokenwirereceiver/metadata.yaml"
	b, err := os.ReadFile(metadata)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "- "+forkLoopName+"\n") {
		t.Errorf("%s does not list %s under tests.goleak.ignore.top", metadata, forkLoopName)
	}
}
