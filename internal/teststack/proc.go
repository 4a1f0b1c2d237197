package teststack

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/childproc"
)

// DefaultGrace is how long a child gets between SIGTERM and SIGKILL when
// ProcOptions.Grace is zero: a collector flushes its pipelines and
// detaches its BPF programs on SIGTERM.
const DefaultGrace = 10 * time.Second

// ProcOptions says how to start a child process.
type ProcOptions struct {
	Name string   // for messages; default: the binary's base name
	Dir  string   // working directory; default: this process's
	Env  []string // added to this process's environment
	// Log receives stdout and stderr. When nil they go to LogPath, a file
	// created for them (default: a new file in the temporary directory).
	Log     io.Writer
	LogPath string
	// Lines keeps stdout's lines (they go to the log too) for WaitLine,
	// WaitLines and Lines.
	Lines bool
	// Stdin gives the child a pipe for its standard input, which Send
	// writes to; without it the child reads /dev/null.
	Stdin bool
	Grace time.Duration // SIGTERM -> SIGKILL; default DefaultGrace
}

// Proc is a running child process in its own process group. When the
// child exits, by itself or by Stop, whatever it left in its group is
// killed with it.
type Proc struct {
	Name    string
	cmd     *exec.Cmd
	logPath string   // "" when the log is the caller's writer
	logFile *os.File // ours to close after the exit
	grace   time.Duration
	lines   *lineBuffer    // nil unless ProcOptions.Lines
	stdin   io.WriteCloser // nil unless ProcOptions.Stdin

	done    chan struct{} // closed when the process has exited and is reaped
	waitErr error         // valid after done
	// mu orders signals to the group against the reap: the group's id is
	// the child's pid, which is free for reuse once the child is reaped.
	mu       sync.Mutex
	reaped   bool // under mu
	stopOnce sync.Once
	stopErr  error
	onStop   func(*Proc) // the Group's bookkeeping
}

// StartProc starts bin with args as described by opts.
func StartProc(opts ProcOptions, bin string, args ...string) (*Proc, error) {
	p := &Proc{Name: opts.Name, grace: opts.Grace, done: make(chan struct{})}
	if p.Name == "" {
		p.Name = filepath.Base(bin)
	}
	if p.grace <= 0 {
		p.grace = DefaultGrace
	}
	log := opts.Log
	if log == nil {
		var err error
		if opts.LogPath != "" {
			p.logFile, err = os.Create(opts.LogPath)
		} else {
			p.logFile, err = os.CreateTemp("", "teststack-"+p.Name+"-*.log")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: creating its log: %w", p.Name, err)
		}
		p.logPath, log = p.logFile.Name(), p.logFile
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = opts.Dir
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own group: Stop signals the group, which reaches whatever the
		// child started too, and a terminal's Ctrl-C reaches only us.
		Setpgid: true,
		// The backstop when we are killed without running cleanups (go
		// test's -timeout panic runs none). childproc.Start makes it
		// fire only when this process ends.
		Pdeathsig: syscall.SIGKILL,
	}
	var pw *os.File
	if opts.Lines {
		// Our own pipe, not StdoutPipe: waiting for the process must
		// never close it under the reader.
		pr, w, err := os.Pipe()
		if err != nil {
			p.closeLog()
			return nil, err
		}
		cmd.Stdout, pw = w, w
		p.lines = newLineBuffer()
		go p.lines.read(pr, log)
	}
	if opts.Stdin {
		// Closed by cmd.Wait once the child has exited.
		w, err := cmd.StdinPipe()
		if err != nil {
			p.closeLog()
			return nil, err
		}
		p.stdin = w
	}
	err := childproc.Start(cmd)
	if pw != nil {
		pw.Close() // the child holds its copy: EOF comes when it exits
	}
	if err != nil {
		p.closeLog()
		return nil, fmt.Errorf("%s: starting %s: %w", p.Name, bin, err)
	}
	p.cmd = cmd
	go p.reap()
	return p, nil
}

// reap waits for the child to exit, kills what it left in its process
// group, and only then reaps it. Until it is reaped, the exited child
// holds its pid, which is the group's id, so a signal to the group cannot
// reach a process that is not ours, however late it comes.
func (p *Proc) reap() {
	var info unix.Siginfo
	var err error
	for {
		err = unix.Waitid(unix.P_PID, p.Pid(), &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.mu.Lock()
	if err == nil {
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL) // ESRCH when nothing is left
	}
	p.waitErr = p.cmd.Wait()
	p.reaped = true
	p.mu.Unlock()
	close(p.done)
}

// signalGroup sends sig to the child's process group unless the child has
// been reaped, when the group's id may be another's.
func (p *Proc) signalGroup(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = syscall.Kill(-p.Pid(), sig)
	}
}

// StartProcT starts a child for the test and stops it in the test's
// cleanup, which also prints the log's tail when the test failed. A child
// that needed SIGKILL fails the test.
func StartProcT(tb testing.TB, opts ProcOptions, bin string, args ...string) *Proc {
	tb.Helper()
	if opts.Log == nil && opts.LogPath == "" {
		opts.LogPath = filepath.Join(tb.TempDir(), nameOr(opts.Name, bin)+".log")
	}
	p, err := StartProc(opts, bin, args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%s: started pid %d: %s %s (log %s)", p.Name, p.Pid(), bin, strings.Join(args, " "), p.logPath)
	tb.Cleanup(func() {
		early := p.exitBeforeStop()
		if err := p.Stop(); err != nil {
			tb.Error(err)
		}
		if tb.Failed() {
			tb.Logf("%s: %s; last lines of its output:\n%s", p.Name, early, p.Tail(40))
		}
	})
	return p
}

func nameOr(name, bin string) string {
	if name != "" {
		return name
	}
	return filepath.Base(bin)
}

// Pid is the child's process id (and its process group's).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Send writes s to the child's standard input (ProcOptions.Stdin).
func (p *Proc) Send(s string) error {
	if p.stdin == nil {
		return fmt.Errorf("%s: its stdin is not ours (ProcOptions.Stdin)", p.Name)
	}
	if _, err := io.WriteString(p.stdin, s); err != nil {
		return fmt.Errorf("%s: writing its stdin: %w", p.Name, err)
	}
	return nil
}

// LogPath is the file holding the child's output, "" when the caller gave
// a writer instead.
func (p *Proc) LogPath() string { return p.logPath }

// Exited reports whether the process has ended, and Wait's result if so.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// exitBeforeStop says, for a failed test's log, whether the process was
// still running when the test ended or how it had ended before: a server
// gone by a signal prints nothing of its own.
func (p *Proc) exitBeforeStop() string {
	done, err := p.Exited()
	switch {
	case !done:
		return "running at the test's end"
	case err == nil:
		return "had exited with status 0 before the test's end"
	default:
		return "had ended before the test's end: " + err.Error()
	}
}

// Wait waits at most timeout for the process to exit by itself and
// returns how it exited.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.waitErr
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", p.Name, timeout)
	}
}

// Stop ends the process group: SIGTERM, and SIGKILL after the grace
// period. Once the child has exited, whatever else is left in its group is
// killed too (as it is whenever the child exits). It returns once the
// child has exited, with an error only when SIGKILL was needed. Safe to
// call more than once and from several goroutines.
func (p *Proc) Stop() error {
	p.stopOnce.Do(func() {
		p.signalGroup(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(p.grace):
			p.stopErr = fmt.Errorf("%s: did not exit within %v of SIGTERM; killed it", p.Name, p.grace)
			p.signalGroup(syscall.SIGKILL)
		}
		<-p.done
		if p.lines != nil {
			<-p.lines.closed // every line is in the log before it closes
		}
		p.closeLog()
		if p.onStop != nil {
			p.onStop(p)
		}
	})
	<-p.done
	return p.stopErr
}

func (p *Proc) closeLog() {
	if p.logFile != nil {
		p.logFile.Close()
	}
}

// Tail returns the last n lines of the child's log (its stdout lines
// when the log is the caller's writer).
func (p *Proc) Tail(n int) string {
	var lines []string
	if p.logPath != "" {
		b, err := os.ReadFile(p.logPath)
		if err != nil {
			return err.Error()
		}
		lines = strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	} else {
		lines = p.Lines()
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// LogContains reports whether the child's log file contains s.
func (p *Proc) LogContains(s string) bool {
	b, _ := os.ReadFile(p.logPath)
	return strings.Contains(string(b), s)
}

// errExited is wrapped by the waits that end because the child is gone.
var errExited = errors.New("exited")
