package teststack

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SlowGet sends a GET to 127.0.0.1:port and reads the whole chunked
// response (up to its terminator). With slow it reads in small pieces
// with pauses through a small receive buffer, so that the server's large
// writes fill the socket and come back partial.
func SlowGet(tb testing.TB, port uint16, slow bool) []byte {
	tb.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		if !slow {
			return nil
		}
		return rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /v1/completions HTTP/1.1\r\nHost: test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	buf := make([]byte, 2048)
	for !bytes.HasSuffix(got, []byte("0\r\n\r\n")) {
		if slow {
			time.Sleep(time.Millisecond)
		}
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			tb.Fatalf("reading the response: %v (%d bytes)", err, len(got))
		}
	}
	return got
}
