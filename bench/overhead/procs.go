package main

// Child process management for the orchestrator: every process it starts
// is registered, so that a failure, a signal or a normal return stops all
// of them (newest first: load generator, then server, then collector) and
// no collector is left holding BPF programs or ports.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a child gets after SIGTERM before SIGKILL: the
// collector flushes its pipelines and detaches its programs on SIGTERM.
const stopGrace = 10 * time.Second

// child is one process the orchestrator started.
type child struct {
	name string
	cmd  *exec.Cmd
	// out reads the child's stdout when it was asked for. The pipe is ours
	// (os.Pipe), not exec's StdoutPipe, so that waiting for the process in
	// the background never closes it under a reader.
	out      *bufio.Reader
	outFile  *os.File
	done     chan struct{} // closed when the process has exited
	waitErr  error         // valid after done
	stopOnce sync.Once
	owner    *procs
}

// procs is the set of live children.
type procs struct {
	mu      sync.Mutex
	live    []*child
	closing bool
	logs    io.Writer // children's stderr (and stdout unless read)
}

// start runs name with args. With wantStdout the child's stdout is readable
// through c.out; otherwise it goes to the log: logTo, or the shared log if
// logTo is nil.
func (p *procs) start(wantStdout bool, logTo io.Writer, name string, args ...string) (*child, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return nil, errors.New("shutting down")
	}
	if logTo == nil {
		logTo = p.logs
	}
	cmd := exec.Command(name, args...)
	cmd.Stderr = logTo
	cmd.Stdout = logTo
	// Own process group: a terminal's Ctrl-C reaches only the orchestrator,
	// which then stops the children in order. Pdeathsig is the backstop if
	// the orchestrator is killed outright (SIGKILL cannot be caught); the
	// kernel then also releases the collector's BPF links with its fds.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c := &child{name: name + " " + firstWord(args), cmd: cmd, done: make(chan struct{}), owner: p}
	var w *os.File
	if wantStdout {
		r, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdout, w = pw, pw
		c.outFile, c.out = r, bufio.NewReader(r)
	}
	err := cmd.Start()
	if w != nil {
		w.Close() // the child holds its own copy; EOF comes when it exits
	}
	if err != nil {
		if c.outFile != nil {
			c.outFile.Close()
		}
		return nil, err
	}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	p.live = append(p.live, c)
	return c, nil
}

func firstWord(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// readLine reads one line of the child's stdout within timeout.
func (c *child) readLine(timeout time.Duration) (string, error) {
	if c.out == nil {
		return "", errors.New("stdout not captured")
	}
	c.outFile.SetReadDeadline(time.Now().Add(timeout))
	line, err := c.out.ReadString('\n')
	c.outFile.SetReadDeadline(time.Time{})
	return strings.TrimSpace(line), err
}

// drain discards the rest of the child's stdout so that it never blocks
// on a full pipe; it ends at the child's exit.
func (c *child) drain() {
	if c.out == nil {
		return
	}
	go func() {
		io.Copy(io.Discard, c.out)
		c.outFile.Close()
	}()
}

// wait waits at most timeout for the child to exit by itself.
func (c *child) wait(timeout time.Duration) error {
	select {
	case <-c.done:
		return c.waitErr
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", c.name, timeout)
	}
}

// stop ends the child: SIGTERM, then SIGKILL after stopGrace. Safe to call
// more than once and from several goroutines; it returns once the process
// has exited.
func (c *child) stop() {
	c.stopOnce.Do(func() {
		if !c.exited() {
			c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.done:
			case <-time.After(stopGrace):
				c.cmd.Process.Kill()
			}
		}
		p := c.owner
		p.mu.Lock()
		p.live = slices.DeleteFunc(p.live, func(x *child) bool { return x == c })
		p.mu.Unlock()
	})
	<-c.done
}

// stopAll stops every live child, newest first, and refuses new ones.
func (p *procs) stopAll() {
	p.mu.Lock()
	p.closing = true
	live := slices.Clone(p.live)
	p.mu.Unlock()
	for i := len(live) - 1; i >= 0; i-- {
		live[i].stop()
	}
}

// waitPortsFree waits (bounded) until every port can be bound on
// 127.0.0.1: a port held by someone else's test is waited for, never taken
// from them, and a clear error names it if it stays busy.
func waitPortsFree(ports []int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy := -1
		for _, p := range ports {
			ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				busy = p
				break
			}
			ln.Close()
		}
		if busy < 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port 127.0.0.1:%d still in use after %v", busy, timeout)
		}
		time.Sleep(time.Second)
	}
}

// tail returns at most the last n bytes of a file, for error reports.
func tail(path string, n int) []byte {
	b, _ := os.ReadFile(path)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return b
}
