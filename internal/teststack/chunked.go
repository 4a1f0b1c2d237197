package teststack

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// ChunkedServer answers each connection's request with a chunked SSE body
// written through one send mode: the head, then one write per event (the
// chunk-size line and the event as separate iovecs), 3 ms apart (more than
// a probe's coalescing window), then a final write. Its send buffer is
// small, so that large writes come back partial.
type ChunkedServer struct {
	Mode   SendMode
	Events [][]byte // chunk payloads
	Final  [][]byte // the last write's iovecs
	// Calls receives, per connection, the syscalls each write took;
	// BeforeFinal CLOCK_MONOTONIC just before the final write. Both must
	// be buffered or read, or the answer blocks.
	Calls       chan []int
	BeforeFinal chan uint64
}

// NewChunkedServer returns a ChunkedServer whose reports are buffered for
// one connection.
func NewChunkedServer(mode SendMode, events, final [][]byte) *ChunkedServer {
	return &ChunkedServer{Mode: mode, Events: events, Final: final,
		Calls: make(chan []int, 1), BeforeFinal: make(chan uint64, 1)}
}

// Serve listens on a free 127.0.0.1 port until the test ends and returns
// the port.
func (s *ChunkedServer) Serve(tb testing.TB) uint16 {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go acceptLoop(ln, func(c net.Conn) { s.answer(c.(*net.TCPConn)) })
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func (s *ChunkedServer) answer(c *net.TCPConn) {
	defer c.Close()
	c.SetWriteBuffer(4096) // small: large writes come back partial
	readHead(bufio.NewReader(c))
	var calls []int
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	n, _ := SendAll(c, s.Mode, [][]byte{[]byte(head)})
	calls = append(calls, n)
	for _, ev := range s.Events {
		time.Sleep(3 * time.Millisecond)
		n, _ = SendAll(c, s.Mode, [][]byte{fmt.Appendf(nil, "%x\r\n", len(ev)), append(ev[:len(ev):len(ev)], "\r\n"...)})
		calls = append(calls, n)
	}
	time.Sleep(3 * time.Millisecond)
	s.BeforeFinal <- MonotonicNow()
	n, _ = SendAll(c, s.Mode, s.Final)
	calls = append(calls, n)
	s.Calls <- calls
	io.Copy(io.Discard, c) // until the client closes
}
