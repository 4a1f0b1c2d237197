package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Exec is how a guest or the native plan ran.
type Exec struct {
	Lines []Line
	Wall  time.Duration
	// CPU is the user and system time of the command and the children
	// it waited for (qemu under timeout(1)).
	CPU time.Duration
	Err error
}

// streamCmd runs cmd in its own process group, reads its stdout and
// stderr line by line with their arrival times, copies them to logPath
// and passes each to progress. When ctx ends (deadline, Ctrl-C) the whole
// group is killed: qemu under timeout(1), or the plan's test binaries.
func streamCmd(ctx context.Context, cmd *exec.Cmd, logPath string, progress func(Line)) Exec {
	logf, err := os.Create(logPath)
	if err != nil {
		return Exec{Err: err}
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return Exec{Err: err}
	}
	defer r.Close()
	cmd.Stdin = nil // /dev/null: qemu -nographic would read its monitor from a terminal
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		w.Close()
		return Exec{Err: err}
	}
	w.Close()
	pgid := cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	defer stop()

	var lines []Line
	br := bufio.NewReaderSize(r, 1<<16)
	for {
		text, err := br.ReadString('\n')
		if text != "" {
			l := Line{At: time.Since(start), Text: strings.TrimRight(text, "\r\n")}
			lines = append(lines, l)
			fmt.Fprintf(logf, "+%9.3f %s\n", l.At.Seconds(), l.Text)
			if progress != nil {
				progress(l)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			_ = cmd.Wait()
			return Exec{Lines: lines, Wall: time.Since(start), Err: err}
		}
	}
	err = cmd.Wait()
	wall := time.Since(start)
	// Whatever the group left behind (nothing, normally) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	var cpu time.Duration
	if ps := cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}
	return Exec{Lines: lines, Wall: wall, CPU: cpu, Err: err}
}
