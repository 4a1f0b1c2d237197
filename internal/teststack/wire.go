package teststack

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// WireServer answers HTTP/1.1 requests with responses given byte for byte
// and write for write: a streaming server's output as that server puts it
// on the wire (internal/teststack/llmwire holds those of vLLM, Ollama, TGI,
// llama.cpp, OpenAI and Anthropic), without the server. It reads each
// request with reads of ReadSize bytes, so that a probe sees it in as many
// pieces as a server with that buffer would, and keeps the connection for
// the next request.
type WireServer struct {
	// Respond picks the response to a request.
	Respond func(WireRequest) WireResponse
	// ReadSize is the size of each read of the request (default 64 KiB).
	ReadSize int

	mu      sync.Mutex
	written []WireWritten
}

// WireRequest is a request as a WireServer read it.
type WireRequest struct {
	Target string // the request line's target, with its query
	Head   string // request line and headers
	Body   []byte
}

// WireResponse is a response: each write goes out in one write syscall,
// after its pause.
type WireResponse struct {
	Writes []WireWrite
}

// WireWrite is one write of a response and the pause before it.
type WireWrite struct {
	After time.Duration
	Data  string
}

// Writes makes a response of data written Interval apart, the first after
// think: the pause a model takes before its first token and between
// tokens.
func Writes(think, interval time.Duration, data ...string) WireResponse {
	var r WireResponse
	for i, d := range data {
		pause := interval
		if i == 0 {
			pause = think
		}
		r.Writes = append(r.Writes, WireWrite{After: pause, Data: d})
	}
	return r
}

// WireWritten is what a WireServer did for one request: how many reads
// the request took, and CLOCK_MONOTONIC when the request was read whole
// and just before and just after each write.
type WireWritten struct {
	Request       WireRequest
	Reads         int
	Read          uint64
	Before, After []uint64
}

// ServeWire serves s on a free 127.0.0.1 port until the test ends and
// returns the port.
func ServeWire(tb testing.TB, s *WireServer) int {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go acceptLoop(ln, s.serve)
	return ln.Addr().(*net.TCPAddr).Port
}

// Written returns what each answered request got, in the order they were
// answered. A client can read a response to its end before the server
// has noted it: WaitWritten waits for it.
func (s *WireServer) Written() []WireWritten {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]WireWritten(nil), s.written...)
}

// WaitWritten waits at most timeout until n requests were answered and
// returns what each got; fewer when the time ran out.
func (s *WireServer) WaitWritten(n int, timeout time.Duration) []WireWritten {
	deadline := time.Now().Add(timeout)
	for {
		w := s.Written()
		if len(w) >= n || time.Now().After(deadline) {
			return w
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *WireServer) serve(c net.Conn) {
	defer c.Close()
	size := s.ReadSize
	if size <= 0 {
		size = 64 << 10
	}
	buf := make([]byte, size)
	var pending []byte // bytes read beyond the last request
	for {
		var w WireWritten
		req, rest, reads, ok := readRequest(c, buf, pending)
		if !ok {
			return
		}
		pending = rest
		w.Request, w.Reads, w.Read = req, reads, MonotonicNow()
		for _, wr := range s.Respond(req).Writes {
			time.Sleep(wr.After)
			w.Before = append(w.Before, MonotonicNow())
			if _, err := c.Write([]byte(wr.Data)); err != nil {
				return
			}
			w.After = append(w.After, MonotonicNow())
		}
		s.mu.Lock()
		s.written = append(s.written, w)
		s.mu.Unlock()
	}
}

// readRequest reads one request (head, and a body of Content-Length
// bytes) with reads into buf, after the bytes already read (pending).
func readRequest(c net.Conn, buf, pending []byte) (req WireRequest, rest []byte, reads int, ok bool) {
	data := pending
	need := -1 // total bytes of the request, once the head is read
	for need < 0 || len(data) < need {
		if need < 0 {
			if i := bytes.Index(data, []byte("\r\n\r\n")); i >= 0 {
				req.Head = string(data[:i+2])
				need = i + 4 + contentLength(req.Head)
				continue
			}
		}
		n, err := c.Read(buf)
		if n > 0 {
			data = append(data, buf[:n]...)
			reads++
		}
		if err != nil {
			return req, nil, reads, false
		}
	}
	line, _, _ := strings.Cut(req.Head, "\r\n")
	if f := strings.Fields(line); len(f) == 3 {
		req.Target = f[1]
	}
	headEnd := len(req.Head) + 2
	req.Body = append([]byte(nil), data[headEnd:need]...)
	return req, append([]byte(nil), data[need:]...), reads, true
}

// contentLength reads a request head's Content-Length (0 without one).
func contentLength(head string) int {
	for _, h := range strings.Split(head, "\r\n") {
		name, value, ok := strings.Cut(h, ":")
		if ok && strings.EqualFold(strings.TrimSpace(name), "content-length") {
			n, _ := strconv.Atoi(strings.TrimSpace(value))
			return n
		}
	}
	return 0
}
