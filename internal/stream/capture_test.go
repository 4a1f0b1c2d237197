package stream

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// A request the server reads in one read of several slices (20 KiB and a
// tail) is captured whole and in order up to the budget: whole slices in
// the loop, the tail after it.
func TestLargeRequestInOneReadIsCaptured(t *testing.T) {
	bpftest.Require(t)
	body := strings.Repeat("0123456789abcdef", 20<<10/16) + "tail"
	request := fmt.Sprintf("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for _, budget := range []int{64 << 10, 8 << 10} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			ln, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				// Wait until the whole request is queued, then take it
				// with one read.
				rc, _ := c.(*net.TCPConn).SyscallConn()
				buf := make([]byte, 64<<10)
				rc.Read(func(fd uintptr) bool {
					n, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_PEEK)
					return err != unix.EAGAIN && n == len(request)
				})
				if n, err := c.Read(buf); err != nil || n != len(request) {
					t.Errorf("the server read %d bytes (%v), want the request's %d in one read", n, err, len(request))
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				time.Sleep(3 * time.Millisecond)
				io.WriteString(c, "8\r\ndata: x\n\r\n")
				time.Sleep(3 * time.Millisecond)
				io.WriteString(c, "0\r\n\r\n")
				io.Copy(io.Discard, c)
			}()
			cfg := testConfig(uint16(ln.Addr().(*net.TCPAddr).Port))
			cfg.RequestCaptureBytes = uint32(budget)
			tr, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			rec := record(t, tr)
			c := dialRaw(t, ln.Addr().String())
			io.WriteString(c, request)
			readChunked(t, bufio.NewReader(c))
			streams := rec.ends(t, 1)
			e := requireCompleted(t, streams, 1)[0]
			want := request[:min(budget, len(request))]
			if got := requestBytes(streams[e.ID]); string(got) != want {
				t.Errorf("captured %d bytes, want the first %d of the request in order (got == want: %v)", len(got), len(want), string(got) == want)
			}
		})
	}
}
