package stream

// Gathered writes (writev) as servers make them: an event spread over
// size line, data and CRLF buffers, or the last chunk and the terminator
// in one write.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// writesServer answers one request with a chunked SSE head, then each
// write of writes as one writev of its buffers, 3 ms apart (more than the
// coalescing window), then waits for the client to close.
func writesServer(t *testing.T, writes [][][]byte) uint16 {
	t.Helper()
	return teststack.ServeOne(t, func(c *net.TCPConn) {
		br := bufio.NewReader(c)
		for {
			if line, err := br.ReadString('\n'); err != nil || line == "\r\n" {
				break
			}
		}
		teststack.SendAll(c, teststack.ModeWrite, [][]byte{[]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")})
		for _, w := range writes {
			time.Sleep(3 * time.Millisecond)
			teststack.SendAll(c, teststack.ModeWritev, w)
		}
		io.Copy(io.Discard, c)
	})
}

// frame is an SSE event as a chunk in separate buffers: size line, data,
// CRLF (as Node's http module hands them to writev).
func frame(ev string) [][]byte {
	return [][]byte{fmt.Appendf(nil, "%x\r\n", len(ev)), []byte(ev), []byte("\r\n")}
}

func size(bufs [][]byte) (n uint64) {
	for _, b := range bufs {
		n += uint64(len(b))
	}
	return n
}

// A terminator is found wherever a gathered write puts it: a [DONE]
// event spread over three buffers, the last chunk and the terminator in
// one write (Node's res.end(data)), or a terminating chunk with trailers.
func TestTerminatorsInGatheredWrites(t *testing.T) {
	bpftest.Require(t)
	done := frame("data: [DONE]\n\n")
	last := append(frame("data: 2\n\n"), []byte("0\r\n\r\n"))
	for _, c := range []struct {
		name   string
		writes [][][]byte
		chunks uint32
		bytes  uint64 // body bytes the kernel should count
	}{
		{"[DONE] then the terminator", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), frame("data: 2\n\n"), done,
			{[]byte("0\r\n\r\n")}}, 3, 3*size(frame("data: 0\n\n")) + size(done)},
		{"last chunk with the terminator", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), last}, 3,
			2*size(frame("data: 0\n\n")) + size(last)},
		{"trailers", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), {[]byte("0\r\nX-Usage: 5\r\n\r\n")}}, 2,
			2*size(frame("data: 0\n\n")) + uint64(len("0\r\nX-Usage: 5\r\n\r\n"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := writesServer(t, c.writes)
			tr, err := Open(testConfig(port))
			if err != nil {
				t.Fatal(err)
			}
			rec := record(t, tr)
			conn := dialRaw(t, fmt.Sprintf("127.0.0.1:%d", port))
			io.WriteString(conn, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
			readChunked(t, bufio.NewReader(conn))
			e := requireCompleted(t, rec.ends(t, 1), 1)[0]
			if e.Stats.Chunks != c.chunks || e.Stats.Bytes != c.bytes || e.Reason != EndTerminator {
				t.Errorf("%d chunks, %d bytes, end %v; want %d chunks, %d bytes, ended by the terminator",
					e.Stats.Chunks, e.Stats.Bytes, e.Reason, c.chunks, c.bytes)
			}
		})
	}
}
