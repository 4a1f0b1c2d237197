package teststack

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestChunkedServerEveryMode: each send mode delivers the same chunked
// body, and a large final write through a small buffer to a slow reader
// comes back partial.
func TestChunkedServerEveryMode(t *testing.T) {
	events := [][]byte{[]byte("data: a\n\n"), []byte("data: bb\n\n")}
	for _, mode := range []SendMode{ModeWrite, ModeWritev, ModeSendto, ModeSendmsg} {
		t.Run(string(mode), func(t *testing.T) {
			big := bytes.Repeat([]byte("x"), 192<<10)
			last := append(fmt.Appendf(nil, "%x\r\n", len(big)), big...)
			last = append(last, "\r\n0\r\n\r\n"...)
			srv := NewChunkedServer(mode, events, [][]byte{last})
			body := SlowGet(t, srv.Serve(t), true)
			calls := <-srv.Calls
			<-srv.BeforeFinal
			head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
			want := head + ChunkFramed("data: a\n\n") + ChunkFramed("data: bb\n\n") + string(last)
			if string(body) != want {
				t.Errorf("got %d bytes, want %d", len(body), len(want))
			}
			if len(calls) != 4 || calls[3] < 2 {
				t.Errorf("syscalls per write %v: want 4 writes, the last partial", calls)
			}
		})
	}
}

// TestRawServer: head, events and close, with the first writes measured.
func TestRawServer(t *testing.T) {
	events := []string{"data: a\n\n", "data: b\n\n"}
	srv := ServeRaw(t, 10*time.Millisecond, time.Millisecond, events)
	resp, err := http.Get("http://" + srv.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != strings.Join(events, "") || resp.ContentLength != -1 {
		t.Errorf("body %q, length %d", body, resp.ContentLength)
	}
	m := <-srv.Measured
	if !(m[0] <= m[1] && m[1] < m[2] && m[2] <= m[3]) || m[2]-m[1] < uint64(10*time.Millisecond) {
		t.Errorf("measured %v: want head, think, first event in order", m)
	}
}
