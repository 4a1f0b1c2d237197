//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a child process of the test (a collector or Prometheus) running
// in its own process group, with its output in a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, valid after done
}

// startProc starts bin in a new process group and registers a cleanup that
// stops the whole group, so nothing outlives the test even when it fails or
// times out. The log is printed (its tail) when the test failed.
func startProc(t *testing.T, dir, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("%s: creating its log: %v", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own group: stop() signals the group, which reaches any child
		// the process started too.
		Setpgid: true,
		// A backstop for a test binary killed without running cleanups
		// (go test's -timeout panic still runs none): the kernel kills
		// the child when its parent thread dies.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("%s: starting %s: %v", name, bin, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	t.Logf("%s: started pid %d: %s %s (log %s)", name, cmd.Process.Pid, bin, strings.Join(args, " "), logPath)
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s: last lines of %s:\n%s", name, logPath, p.tail(40))
		}
	})
	return p
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits up to 15 s for a clean
// exit (the collector detaches its BPF programs and flushes its exporters),
// then SIGKILLs the group.
func (p *proc) stop(t *testing.T) {
	pgid := p.cmd.Process.Pid
	if done, _ := p.exited(); !done {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			t.Errorf("%s: did not exit within 15s of SIGTERM; killing it", p.name)
		}
	}
	// Whatever else is left in the group (ESRCH when nothing is).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logContains reports whether the process's log contains s.
func (p *proc) logContains(s string) bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte(s))
}

// waitReady polls ready until it succeeds, the process exits or timeout
// passes, and fails the test with the log's tail on the last two.
func (p *proc) waitReady(t *testing.T, timeout time.Duration, what string, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if done, err := p.exited(); done {
			t.Fatalf("%s exited before %s (%v); log:\n%s", p.name, what, err, p.tail(40))
		}
		if last = ready(); last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within %s: %v; log:\n%s", p.name, what, timeout, last, p.tail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// httpOK returns a readiness check that wants 200 from url.
func httpOK(url string) func() error {
	client := &http.Client{Timeout: 2 * time.Second}
	return func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}

// tcpListening returns a readiness check that wants addr to accept a
// connection.
func tcpListening(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago (the kernel's choice for port 0).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// requirePortsFree fails the test when one of the fixed ports of the
// default config.yaml (or the streams port) is taken, naming who to stop:
// the e2e run uses the default configuration on purpose, ports included.
func requirePortsFree(t *testing.T, ports map[int]string) {
	t.Helper()
	var busy []string
	for port, what := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			busy = append(busy, fmt.Sprintf("%d (%s): %v", port, what, err))
			continue
		}
		l.Close()
	}
	if len(busy) > 0 {
		t.Fatalf("ports the e2e test needs are in use (is a collector from `make run` still running?):\n  %s",
			strings.Join(busy, "\n  "))
	}
}

// lookBin resolves a binary from an environment variable or a default.
func lookBin(t *testing.T, env, def, hint string) string {
	t.Helper()
	name := def
	if v := os.Getenv(env); v != "" {
		name = v
	}
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): %s", name, err, hint)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
