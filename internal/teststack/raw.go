package teststack

import (
	"bufio"
	"io"
	"maps"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// RawServer answers one request per connection the way simple Python
// servers do: the status line and headers in one write, then after think
// each event in its own write interval apart, then close (a
// close-delimited HTTP/1.0 body).
type RawServer struct {
	Addr string
	Port uint16
	// Measured receives, per connection, CLOCK_MONOTONIC just before and
	// after the head's write and just before and after the first event's
	// write (buffered: 16 connections).
	Measured chan [4]uint64
}

// ServeRaw starts a RawServer on a free 127.0.0.1 port until the test
// ends.
func ServeRaw(tb testing.TB, think, interval time.Duration, events []string) *RawServer {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	s := &RawServer{Addr: ln.Addr().String(), Port: uint16(ln.Addr().(*net.TCPAddr).Port), Measured: make(chan [4]uint64, 16)}
	go acceptLoop(ln, func(c net.Conn) { s.answer(c, think, interval, events) })
	return s
}

// acceptLoop hands each accepted connection to its own goroutine until
// the listener is closed.
func acceptLoop(ln net.Listener, answer func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go answer(c)
	}
}

// readHead reads a request head up to its blank line.
func readHead(br *bufio.Reader) {
	for {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			return
		}
	}
}

func (s *RawServer) answer(c net.Conn, think, interval time.Duration, events []string) {
	defer c.Close()
	readHead(bufio.NewReader(c))
	var m [4]uint64
	m[0] = MonotonicNow()
	io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
	m[1] = MonotonicNow()
	time.Sleep(think)
	for i, ev := range events {
		if i == 0 {
			m[2] = MonotonicNow()
		}
		io.WriteString(c, ev)
		if i == 0 {
			m[3] = MonotonicNow()
			s.Measured <- m
		}
		time.Sleep(interval)
	}
}

// ServeOne serves the first connection to a free 127.0.0.1 port with
// handle, as ServeConn does. It returns the port.
func ServeOne(tb testing.TB, handle func(c *net.TCPConn)) uint16 {
	tb.Helper()
	_, port, _ := ServeConn(tb, func(c *net.TCPConn) error {
		handle(c)
		return nil
	})
	return port
}

// ServeConn serves the first connection to a free 127.0.0.1 port with
// answer, which owns it until it returns (the connection is closed then);
// the listener closes when the test ends. The channel gets answer's error,
// or the accept's.
func ServeConn(tb testing.TB, answer func(c *net.TCPConn) error) (addr string, port uint16, done <-chan error) {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	out := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			out <- err
			return
		}
		defer c.Close()
		out <- answer(c.(*net.TCPConn))
	}()
	return ln.Addr().String(), uint16(ln.Addr().(*net.TCPAddr).Port), out
}

// ScriptServer answers each connection's request with the writes listed
// for its path, each in a write of its own and in order, then closes the
// connection: for heads and bodies a test spells out byte by byte. Every
// connection is answered from an OS thread pinned to the same CPU, so the
// kernel runs the programs its writes fire on that CPU, connection after
// connection when the test makes them one at a time: what one leaves in a
// per-CPU buffer is there for the next.
type ScriptServer struct {
	Addr string
	Port uint16
}

// ServeScript starts a ScriptServer on a free 127.0.0.1 port until the
// test ends. A path it has no writes for is answered with none.
func ServeScript(tb testing.TB, writes map[string][]string) *ScriptServer {
	tb.Helper()
	writes = maps.Clone(writes)
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		tb.Fatal(err)
	}
	cpu := 0
	for !cpus.IsSet(cpu) {
		cpu++
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go acceptLoop(ln, func(c net.Conn) {
		defer c.Close()
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var one unix.CPUSet
		one.Set(cpu)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return
		}
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n') // "GET /path HTTP/1.1"
		if err != nil {
			return
		}
		readHead(br)
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return
		}
		for _, w := range writes[fields[1]] {
			if _, err := io.WriteString(c, w); err != nil {
				return
			}
		}
	})
	return &ScriptServer{Addr: ln.Addr().String(), Port: uint16(ln.Addr().(*net.TCPAddr).Port)}
}
