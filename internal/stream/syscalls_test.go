package stream

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// TestEverySendSyscall: write, writev, sendto and sendmsg give the same
// stream: the head parsed (HTTP), each event one chunk, exact body bytes,
// ended by the chunked terminator.
func TestEverySendSyscall(t *testing.T) {
	bpftest.Require(t)
	for _, mode := range []teststack.SendMode{teststack.ModeWrite, teststack.ModeWritev, teststack.ModeSendto, teststack.ModeSendmsg} {
		t.Run(string(mode), func(t *testing.T) {
			events := [][]byte{[]byte("data: a\n\n"), []byte("data: {\"token\":\"bb\"}\n\n"), []byte("data: " + strings.Repeat("c", 100) + "\n\n")}
			srv := teststack.NewChunkedServer(mode, events, [][]byte{[]byte("0\r\n\r\n")})
			port := srv.Serve(t)
			rec := trace(t, port)
			body := teststack.SlowGet(t, port, false)
			<-srv.Calls
			<-srv.BeforeFinal

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
	for _, mode := range []teststack.SendMode{teststack.ModeWrite, teststack.ModeWritev} {
		t.Run(string(mode), func(t *testing.T) {
			big := bytes.Repeat([]byte("x"), 192<<10)
			last := append(fmt.Appendf(nil, "%x\r\n", len(big)), big...)
			last = append(last, "\r\n0\r\n\r\n"...)
			srv := teststack.NewChunkedServer(mode, [][]byte{[]byte("data: first\n\n")}, [][]byte{last})
			port := srv.Serve(t)
			rec := trace(t, port)
			body := teststack.SlowGet(t, port, true)
			calls := <-srv.Calls
			beforeFinal := <-srv.BeforeFinal
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
			srv := teststack.NewChunkedServer(teststack.ModeWrite, events, [][]byte{[]byte("0\r\n\r\n")})
			port := srv.Serve(t)
			var ports []uint16
			for i := range n - 1 {
				ports = append(ports, uint16(1000+i)) // privileged ports this test never serves
			}
			_, rec := traceWith(t, testConfig(append(ports, port)...))
			teststack.SlowGet(t, port, false)
			<-srv.Calls
			<-srv.BeforeFinal
			ends := completed(rec.ends(t, 1))
			if len(ends) != 1 || ends[0].Stats.Chunks != uint32(len(events)) || ends[0].Reason != EndTerminator {
				t.Fatalf("streams %+v, want one of %d chunks ended by the terminator", ends, len(events))
			}
		})
	}
}
