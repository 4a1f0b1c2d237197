package teststack

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// lineBuffer keeps a child's stdout lines as they arrive.
type lineBuffer struct {
	mu      sync.Mutex
	lines   []string
	eof     bool
	changed chan struct{} // closed (and replaced) at each new line and at EOF
	closed  chan struct{} // closed after EOF, once the pipe is closed
}

func newLineBuffer() *lineBuffer {
	return &lineBuffer{changed: make(chan struct{}), closed: make(chan struct{})}
}

// read copies lines from r into the buffer and to log, until EOF: every
// writer of the pipe (the child and anything it started) has closed it.
func (b *lineBuffer) read(r *os.File, log io.Writer) {
	defer close(b.closed)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(log, line)
		b.mu.Lock()
		b.lines = append(b.lines, line)
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.eof = true
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// Lines returns the stdout lines read so far (nil unless ProcOptions.Lines).
func (p *Proc) Lines() []string {
	if p.lines == nil {
		return nil
	}
	p.lines.mu.Lock()
	defer p.lines.mu.Unlock()
	return append([]string(nil), p.lines.lines...)
}

// WaitLine returns the first stdout line (from the start) that match
// accepts, waiting at most timeout; it fails at once when stdout ends
// without one.
func (p *Proc) WaitLine(timeout time.Duration, match func(string) bool) (string, error) {
	got, err := p.WaitLines(timeout, 1, match)
	if err != nil {
		return "", err
	}
	return got[0], nil
}

// WaitLines waits at most timeout until n stdout lines match and returns
// every matching line so far. A nil match accepts every line.
func (p *Proc) WaitLines(timeout time.Duration, n int, match func(string) bool) ([]string, error) {
	if p.lines == nil {
		return nil, fmt.Errorf("%s: stdout lines not kept (ProcOptions.Lines)", p.Name)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b := p.lines
		b.mu.Lock()
		var got []string
		for _, l := range b.lines {
			if match == nil || match(l) {
				got = append(got, l)
			}
		}
		eof, changed := b.eof, b.changed
		b.mu.Unlock()
		if len(got) >= n {
			return got, nil
		}
		if eof {
			_, werr := p.Exited()
			return got, fmt.Errorf("%s: %w (%v) after %d of %d lines; output:\n%s", p.Name, errExited, werr, len(got), n, p.Tail(40))
		}
		select {
		case <-changed:
		case <-deadline.C:
			return got, fmt.Errorf("%s: %d of %d lines within %v; output:\n%s", p.Name, len(got), n, timeout, p.Tail(40))
		}
	}
}

// WaitReady polls ready every 100 ms until it succeeds, the process
// exits or timeout passes; the error names what was waited for and
// carries the log's tail.
func (p *Proc) WaitReady(timeout time.Duration, what string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s %w before %s (%v); output:\n%s", p.Name, errExited, what, err, p.Tail(40))
		}
		last := ready()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no %s within %s: %v; output:\n%s", p.Name, what, timeout, last, p.Tail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
