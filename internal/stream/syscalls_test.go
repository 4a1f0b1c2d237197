package stream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// sendMode is one way an application hands a socket its bytes. The probe
// reads what a write carried from the syscall's own arguments, so each of
// them must give the same stream.
type sendMode string

const (
	modeWrite   sendMode = "write"
	modeWritev  sendMode = "writev"
	modeSendto  sendMode = "sendto"
	modeSendmsg sendMode = "sendmsg"
)

// sendOnce makes one syscall of the given mode and returns the bytes it
// took: possibly fewer than offered on a non-blocking socket.
func sendOnce(fd int, mode sendMode, parts [][]byte) (int, error) {
	switch mode {
	case modeWrite:
		return unix.Write(fd, parts[0])
	case modeSendto:
		p := parts[0]
		n, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	case modeWritev:
		return unix.Writev(fd, parts)
	case modeSendmsg:
		return unix.SendmsgBuffers(fd, parts, nil, nil, 0)
	}
	return 0, fmt.Errorf("unknown mode %q", mode)
}

// sendAll writes parts (iovecs for writev/sendmsg; write and sendto get
// them joined) with one mode until all is taken, waiting for the socket
// to drain between partial writes. It returns the number of syscalls.
func sendAll(c *net.TCPConn, mode string, parts [][]byte) (int, error) {
	m := sendMode(mode)
	if m == modeWrite || m == modeSendto {
		parts = [][]byte{bytes.Join(parts, nil)}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	calls := 0
	for len(parts) > 0 {
		var n int
		var serr error
		if err := rc.Write(func(fd uintptr) bool {
			n, serr = sendOnce(int(fd), m, parts)
			return serr != unix.EAGAIN
		}); err != nil {
			return calls, err
		}
		if serr != nil {
			return calls, serr
		}
		calls++
		for n > 0 { // drop what was taken
			if n >= len(parts[0]) {
				n -= len(parts[0])
				parts = parts[1:]
			} else {
				parts[0] = parts[0][n:]
				n = 0
			}
		}
		for len(parts) > 0 && len(parts[0]) == 0 {
			parts = parts[1:]
		}
	}
	return calls, nil
}

// chunkedServer answers each connection's request with a chunked SSE body
// written through one send mode: the head, then one write per event (the
// chunk-size line and the event as separate iovecs), then a final write.
// It reports the syscalls each write took and CLOCK_MONOTONIC before the
// final write.
type chunkedServer struct {
	mode        string
	events      [][]byte // chunk payloads
	final       [][]byte // the last write's iovecs
	calls       chan []int
	beforeFinal chan uint64
}

func (s *chunkedServer) serve(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.answer(c.(*net.TCPConn))
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func (s *chunkedServer) answer(c *net.TCPConn) {
	defer c.Close()
	c.SetWriteBuffer(4096) // small: large writes come back partial
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil || line == "\r\n" {
			break
		}
	}
	var calls []int
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	n, _ := sendAll(c, s.mode, [][]byte{[]byte(head)})
	calls = append(calls, n)
	for _, ev := range s.events {
		time.Sleep(3 * time.Millisecond) // apart by more than streams.coalesce
		n, _ = sendAll(c, s.mode, [][]byte{fmt.Appendf(nil, "%x\r\n", len(ev)), append(ev[:len(ev):len(ev)], "\r\n"...)})
		calls = append(calls, n)
	}
	time.Sleep(3 * time.Millisecond)
	s.beforeFinal <- monotonicNow()
	n, _ = sendAll(c, s.mode, s.final)
	calls = append(calls, n)
	s.calls <- calls
	io.Copy(io.Discard, c) // until the client closes
}

// slowGet sends a request and reads the whole response in small pieces
// with pauses, through a small receive buffer, so that the server's large
// writes fill the socket and come back partial.
func slowGet(t *testing.T, port uint16, slow bool) []byte {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		if !slow {
			return nil
		}
		return rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
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
			t.Fatalf("reading the response: %v (%d bytes)", err, len(got))
		}
	}
	return got
}

// TestEverySendSyscall: write, writev, sendto and sendmsg give the same
// stream: the head parsed (HTTP), each event one chunk, exact body bytes,
// ended by the chunked terminator.
func TestEverySendSyscall(t *testing.T) {
	bpftest.Require(t)
	for _, mode := range []string{"write", "writev", "sendto", "sendmsg"} {
		t.Run(mode, func(t *testing.T) {
			events := [][]byte{[]byte("data: a\n\n"), []byte("data: {\"token\":\"bb\"}\n\n"), []byte("data: " + strings.Repeat("c", 100) + "\n\n")}
			srv := &chunkedServer{mode: mode, events: events, final: [][]byte{[]byte("0\r\n\r\n")},
				calls: make(chan []int, 1), beforeFinal: make(chan uint64, 1)}
			port := srv.serve(t)
			tr, err := Open(testConfig(port))
			if err != nil {
				t.Fatal(err)
			}
			rec := record(t, tr)
			body := slowGet(t, port, false)
			<-srv.calls
			<-srv.beforeFinal

			streams := rec.ends(t, 1)
			ends := requireCompleted(t, streams, 1)
			e := ends[0]
			var head *Record
			for _, r := range streams[e.ID] {
				if r.Kind == KindResponse {
					head = &r
				}
			}
			if head == nil || head.Flags&RespHTTP == 0 || !bytes.HasPrefix(head.Data, []byte("HTTP/1.1 200 OK\r\n")) {
				t.Fatalf("response head not seen as HTTP: %+v", head)
			}
			headLen := bytes.Index(body, []byte("\r\n\r\n")) + 4
			if e.Stats.Chunks != uint32(len(events)) || e.Reason != EndTerminator {
				t.Errorf("%d chunks, end %v; want %d chunks ended by the terminator", e.Stats.Chunks, e.Reason, len(events))
			}
			if want := uint64(len(body) - headLen); e.Stats.Bytes != want {
				t.Errorf("%d body bytes, want %d", e.Stats.Bytes, want)
			}
		})
	}
}

// TestPartialWritesAreJudgedByWhatWasSent: a non-blocking server whose
// last write (a 192 KiB event followed by the terminator) is taken in
// several partial writes. Only the write that really carried the
// terminator ends the stream, and every byte is counted once.
func TestPartialWritesAreJudgedByWhatWasSent(t *testing.T) {
	bpftest.Require(t)
	for _, mode := range []string{"write", "writev"} {
		t.Run(mode, func(t *testing.T) {
			big := bytes.Repeat([]byte("x"), 192<<10)
			last := append(fmt.Appendf(nil, "%x\r\n", len(big)), big...)
			last = append(last, "\r\n0\r\n\r\n"...)
			srv := &chunkedServer{mode: mode, events: [][]byte{[]byte("data: first\n\n")}, final: [][]byte{last},
				calls: make(chan []int, 1), beforeFinal: make(chan uint64, 1)}
			port := srv.serve(t)
			tr, err := Open(testConfig(port))
			if err != nil {
				t.Fatal(err)
			}
			rec := record(t, tr)
			body := slowGet(t, port, true)
			calls := <-srv.calls
			beforeFinal := <-srv.beforeFinal
			if n := calls[len(calls)-1]; n < 2 {
				t.Fatalf("the last write took %d syscall(s): no partial write happened, the test proves nothing", n)
			}
			t.Logf("syscalls per write: %v", calls)

			ends := requireCompleted(t, rec.ends(t, 1), 1)
			e := ends[0]
			headLen := bytes.Index(body, []byte("\r\n\r\n")) + 4
			if want := uint64(len(body) - headLen); e.Stats.Bytes != want {
				t.Errorf("%d body bytes, want %d", e.Stats.Bytes, want)
			}
			if e.Reason != EndTerminator {
				t.Errorf("end %v, want terminator", e.Reason)
			}
			// The end came with the final partial write, not the first.
			if e.Stats.LastChunkTS < beforeFinal || e.Stats.Chunks < 2 {
				t.Errorf("last chunk at %d, before the final write %d, %d chunks: the stream ended at the first partial write",
					e.Stats.LastChunkTS, beforeFinal, e.Stats.Chunks)
			}
		})
	}
}

// TestLongPortLists: up to 16 ports are read from .rodata, more from the
// tw_st_ports map; the last port of either list is watched.
func TestLongPortLists(t *testing.T) {
	bpftest.Require(t)
	for _, n := range []int{maxROPorts, maxROPorts + 4} {
		t.Run(fmt.Sprintf("%d ports", n), func(t *testing.T) {
			events := [][]byte{[]byte("data: a\n\n"), []byte("data: b\n\n")}
			srv := &chunkedServer{mode: "write", events: events, final: [][]byte{[]byte("0\r\n\r\n")},
				calls: make(chan []int, 1), beforeFinal: make(chan uint64, 1)}
			port := srv.serve(t)
			var ports []uint16
			for i := range n - 1 {
				ports = append(ports, uint16(1000+i)) // privileged ports this test never serves
			}
			tr, err := Open(testConfig(append(ports, port)...))
			if err != nil {
				t.Fatal(err)
			}
			rec := record(t, tr)
			slowGet(t, port, false)
			<-srv.calls
			<-srv.beforeFinal
			ends := completed(rec.ends(t, 1))
			if len(ends) != 1 || ends[0].Stats.Chunks != uint32(len(events)) || ends[0].Reason != EndTerminator {
				t.Fatalf("streams %+v, want one of %d chunks ended by the terminator", ends, len(events))
			}
		})
	}
}
