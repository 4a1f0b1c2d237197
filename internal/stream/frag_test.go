package stream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// TestWriteTailsFromTheKernelsCopy: where the kernel has bpf_rdonly_cast
// (6.2+), a body write's last bytes are read from the kernel's copy of
// them. A server that writes from one thread, as an event loop does, has
// the tail of every body write after its first found there, whatever the
// send syscall: at most one write per stream is read from its memory
// (the fragment may move to a new page once in a stream this short). The
// streams are exact either way: every event a chunk, the last one with
// the terminator in one write (as Node's res.end(data) makes it), the
// event that may end the stream sent to user space (from the kernel's copy
// where it is read). Kernels without the kfunc read the writer's memory
// and say why.
func TestWriteTailsFromTheKernelsCopy(t *testing.T) {
	bpftest.Require(t)
	base, baseErr := DirectMapBase()
	switch {
	case !RegsByCast() && baseErr == nil:
		t.Fatalf("a direct-map base %#x on a kernel without bpf_rdonly_cast", base)
	case !RegsByCast():
		t.Logf("write tails from the writer's memory on this kernel: %v", baseErr)
	case baseErr != nil:
		t.Fatalf("no direct-map base on a kernel with bpf_rdonly_cast: %v", baseErr)
	}
	var events [][]byte
	for i := range 12 {
		events = append(events, []byte(teststack.OpenAIEvent(i)))
	}
	finish := `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	events = append(events, []byte(finish))
	last := teststack.OpenAIEvent(len(events))
	final := [][]byte{fmt.Appendf(nil, "%x\r\n", len(last)), []byte(last + "\r\n0\r\n\r\n")}
	modes := []teststack.SendMode{teststack.ModeWrite, teststack.ModeWritev, teststack.ModeSendto, teststack.ModeSendmsg}
	for _, byUser := range []bool{false, true} {
		if byUser && baseErr != nil {
			continue // the only way here
		}
		// A server per send syscall on its own port, one stream at a
		// time.
		t.Run(fmt.Sprintf("tailByUser=%v", byUser), func(t *testing.T) {
			srvs := make([]*teststack.ChunkedServer, len(modes))
			ports := make([]uint16, len(modes))
			for i, mode := range modes {
				srvs[i] = teststack.NewChunkedServer(mode, events, final)
				ports[i] = srvs[i].Serve(t)
			}
			rec := traceTails(t, byUser, ports...)
			tr := rec.tr
			t.Logf("write tails from %s", tr.TailSource())
			seen := map[ID]bool{}
			for i, mode := range modes {
				t.Run(string(mode), func(t *testing.T) {
					before, err := tr.Counters()
					if err != nil {
						t.Fatal(err)
					}
					body := teststack.SlowGet(t, ports[i], false)
					<-srvs[i].Calls
					<-srvs[i].BeforeFinal
					var fresh []ID
					for got := range rec.endIDs(len(seen) + 1) {
						if !seen[got] {
							seen[got] = true
							fresh = append(fresh, got)
						}
					}
					if len(fresh) != 1 {
						t.Fatalf("new streams %v, want this request's one", fresh)
					}
					id := fresh[0]
					streams := rec.ends(t, len(seen))
					e := requireCompleted(t, map[ID][]Record{id: streams[id]}, 1)[0]
					headLen := bytes.Index(body, []byte("\r\n\r\n")) + 4
					if want := uint32(len(events) + 1); e.Stats.Chunks != want || e.Reason != EndTerminator {
						t.Errorf("%d chunks, end %v; want %d chunks ended by the terminator", e.Stats.Chunks, e.Reason, want)
					}
					if want := uint64(len(body) - headLen); e.Stats.Bytes != want {
						t.Errorf("%d body bytes, want %d", e.Stats.Bytes, want)
					}
					var tail []byte
					for _, r := range streams[id] {
						if r.Kind == KindBody && r.Flags&BodyTail != 0 {
							tail = r.Data
						}
					}
					if !bytes.Contains(tail, []byte(`"finish_reason":"stop"}]}`)) {
						t.Errorf("the stream's possible last event went to user space as %q; want the finish event", tail)
					}
					c, err := tr.Counters()
					if err != nil {
						t.Fatal(err)
					}
					fromUser := c.TailFromUser - before.TailFromUser
					t.Logf("%d of %d body writes read from the writer's memory", fromUser, len(events)+1)
					fromCopy := baseErr == nil && !byUser
					if fromCopy && fromUser > 1 || !fromCopy && fromUser != 0 {
						t.Errorf("%d of %d body writes read from the writer's memory, reading the kernel's copy %v; want at most 1 if so, else 0 (counted only then)",
							fromUser, len(events)+1, fromCopy)
					}
				})
			}
		})
	}
}

// TestZerocopyWritesAreReadFromTheWriter: a socket with SO_ZEROCOPY whose
// events go out with MSG_ZEROCOPY hands the kernel its pages instead of
// copying them into the page fragment, which then holds older bytes: the
// programs read every such write from the writer's memory (counted), and
// the stream is exact, ended by the terminator of its last write. Where
// the kernel's copy is not read at all, the same stream is exact too.
func TestZerocopyWritesAreReadFromTheWriter(t *testing.T) {
	bpftest.Require(t)
	const events = 8
	port := teststack.ServeOne(t, func(c *net.TCPConn) {
		readRequestHead(c)
		rc, err := c.SyscallConn()
		if err != nil {
			t.Error(err)
			return
		}
		rc.Control(func(fd uintptr) {
			if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ZEROCOPY, 1); err != nil {
				t.Errorf("SO_ZEROCOPY: %v", err)
			}
		})
		// The head, copied: what the page fragment ends with when the
		// zerocopy writes come.
		teststack.SendAll(c, teststack.ModeWrite, [][]byte{[]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")})
		send := func(flags int, bufs ...[]byte) {
			rc.Write(func(fd uintptr) bool {
				_, err := unix.SendmsgBuffers(int(fd), bufs, nil, nil, flags)
				return err != unix.EAGAIN
			})
		}
		for i := range events {
			time.Sleep(3 * time.Millisecond)
			send(unix.MSG_ZEROCOPY, frame(teststack.OpenAIEvent(i))...)
		}
		time.Sleep(3 * time.Millisecond)
		send(unix.MSG_ZEROCOPY, append(frame(teststack.OpenAIEvent(events)), []byte("0\r\n\r\n"))...)
		io.Copy(io.Discard, c)
	})
	rec := trace(t, port)
	before := counters(t, rec.tr)
	conn := dialRaw(t, fmt.Sprintf("127.0.0.1:%d", port))
	io.WriteString(conn, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
	readChunked(t, bufio.NewReader(conn))
	e := requireCompleted(t, rec.ends(t, 1), 1)[0]
	if e.Stats.Chunks != events+1 || e.Reason != EndTerminator {
		t.Errorf("%d chunks, end %v; want %d chunks ended by the terminator", e.Stats.Chunks, e.Reason, events+1)
	}
	// Every body write but the first (whose start goes to user space
	// from the writer's buffer anyway); none counted where the writer's
	// memory is the only way.
	want := uint64(events)
	if _, err := DirectMapBase(); err != nil {
		want = 0
	}
	if n := counters(t, rec.tr).TailFromUser - before.TailFromUser; n != want {
		t.Errorf("%d body writes counted as read from the writer's memory; want %d", n, want)
	}
}

// readRequestHead reads a request's head from c, up to its blank line.
func readRequestHead(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		if line, err := br.ReadString('\n'); err != nil || line == "\r\n" {
			return
		}
	}
}
