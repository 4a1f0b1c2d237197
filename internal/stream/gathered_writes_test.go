package stream

// Gathered writes (writev) as servers make them: an event spread over
// size line, data and CRLF buffers, or the last chunk and the terminator
// in one write.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
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

// A terminator is found wherever a gathered write of at most eight buffers
// puts it (more: TestNodeQueueEndsAtItsTerminator): a [DONE] event spread
// over three buffers, the last chunk and the terminator in one write
// (Node's res.end(data)), or a terminating chunk with trailers.
func TestTerminatorsInGatheredWrites(t *testing.T) {
	bpftest.Require(t)
	done := frame("data: [DONE]\n\n")
	last := append(frame("data: 2\n\n"), []byte("0\r\n\r\n"))
	// Node's http module: res.write(ev); res.end() in one tick is one
	// writev of the size, its CRLF, the event, its CRLF and the terminator.
	nodeEnd := func(ev string) [][]byte { return append(nodeChunk(ev), []byte("0\r\n\r\n")) }
	nodeDone, nodeLast := nodeEnd("data: [DONE]\n\n"), nodeEnd("data: {\"choices\":[{\"delta\":{\"content\":\"2\"}}]}\n\n")
	// Eight buffers, the most whose end is looked for in the syscall's
	// iovec array (TestNodeQueueEndsAtItsTerminator), one of them empty:
	// the size line whole, then the event's data in two.
	// Six: [DONE] and its blank line apart, so that the window of the
	// last four starts at the event. Seven: an event in two, after an
	// empty buffer that starts the window.
	six := [][]byte{[]byte("e"), []byte("\r\n"), []byte("data: [DONE]"), []byte("\n\n"), []byte("\r\n"), []byte("0\r\n\r\n")}
	first, rest := `data: {"choices":[{"delta":`, `{"content":"2"}}]}`+"\n\n"
	seven := [][]byte{fmt.Appendf(nil, "%x", len(first+rest)), []byte("\r\n"), []byte(first), {}, []byte(rest), []byte("\r\n"),
		[]byte("0\r\n\r\n")}
	head, tail := `data: {"n":`, "2}\n\n"
	eight := [][]byte{fmt.Appendf(nil, "%x\r\n", len(head+tail)), []byte(head), {}, []byte(tail), []byte("\r\n"), {},
		[]byte("0\r\n"), []byte("\r\n")}
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
		{"Node's [DONE] and end in one tick", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), nodeDone}, 2,
			2*size(frame("data: 0\n\n")) + size(nodeDone)},
		{"Node's last event and end in one tick", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), nodeLast}, 3,
			2*size(frame("data: 0\n\n")) + size(nodeLast)},
		{"six buffers, [DONE] apart", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), six}, 2,
			2*size(frame("data: 0\n\n")) + size(six)},
		{"seven buffers, the window starting empty", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), seven}, 3,
			2*size(frame("data: 0\n\n")) + size(seven)},
		{"eight buffers, two empty", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), eight}, 3,
			2*size(frame("data: 0\n\n")) + size(eight)},
		{"trailers", [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), {[]byte("0\r\nX-Usage: 5\r\n\r\n")}}, 2,
			2*size(frame("data: 0\n\n")) + uint64(len("0\r\nX-Usage: 5\r\n\r\n"))},
	} {
		// Where the kernel's copy of a write is read (6.2+), the writer's
		// buffers are read only for short writes: tailByUser reads them
		// for every write, as kernels before 6.2 do.
		for _, byUser := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tailByUser=%v", c.name, byUser), func(t *testing.T) {
				port := writesServer(t, c.writes)
				rec := traceTails(t, byUser, port)
				getEvents(t, port)
				e := requireCompleted(t, rec.ends(t, 1), 1)[0]
				if e.Stats.Chunks != c.chunks || e.Stats.Bytes != c.bytes || e.Reason != EndTerminator {
					t.Errorf("%d chunks, %d bytes, end %v; want %d chunks, %d bytes, ended by the terminator",
						e.Stats.Chunks, e.Stats.Bytes, e.Reason, c.chunks, c.bytes)
				}
			})
		}
	}
}

// nodeChunk is an event as Node's http module hands it to writev: the
// chunk's size, its CRLF, the event, its CRLF.
func nodeChunk(ev string) [][]byte {
	return [][]byte{fmt.Appendf(nil, "%x", len(ev)), []byte("\r\n"), []byte(ev), []byte("\r\n")}
}

// Node's queue behind a slow client: the events queued while the socket
// was full and res.end()'s terminator go out in one writev of four
// buffers per event and one. Its end is found from the write's iterator
// after the call (fexit, kretprobe) or the kernel's copy of its last
// bytes (tp_btf, fexit on 6.2+), not from the syscall's iovec array,
// which is looked at for eight buffers at most: with the other hook types
// (raw_tracepoint, tracepoint) or tp_btf reading the writer's memory the
// terminator is missed, as docs/measurements.md says, and the client's
// close ends the stream. The counts are the server's either way.
func TestNodeQueueEndsAtItsTerminator(t *testing.T) {
	bpftest.Require(t)
	var queued [][]byte
	for _, ev := range []string{"data: 2\n\n", "data: 3\n\n", `data: {"choices":[{"delta":{"content":"4"}}]}` + "\n\n"} {
		queued = append(queued, nodeChunk(ev)...)
	}
	queued = append(queued, []byte("0\r\n\r\n"))
	writes := [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), queued}
	const chunks = 3
	bytes := 2*size(frame("data: 0\n\n")) + size(queued)
	for _, byUser := range []bool{false, true} {
		t.Run(fmt.Sprintf("tailByUser=%v", byUser), func(t *testing.T) {
			port := writesServer(t, writes)
			rec := traceTails(t, byUser, port)
			tr := rec.tr
			sent := sentHook(t, tr)
			before := counters(t, tr)
			conn := getEvents(t, port)
			after := counters(t, tr)
			// tailReason is set where the kernel's copy is not read
			// (tailSource's reasons, or a write hook other than fexit
			// and tp_btf); TailFromUser counts a write whose copy was not
			// there (a page fragment that holds fewer than its last 16
			// bytes).
			fromUser := tr.tailReason != nil || after.TailFromUser > before.TailFromUser
			want := EndTerminator
			if sent != hook.Fentry && sent != hook.Kprobe && fromUser {
				t.Logf("sent by %s, tails from %s: the terminator is not found", sent, tr.TailSource())
				want = EndClientClosed
				conn.Close()
			}
			e := requireCompleted(t, rec.ends(t, 1), 1)[0]
			if e.Stats.Chunks != chunks || e.Stats.Bytes != bytes || e.Reason != want {
				t.Errorf("sent by %s: %d chunks, %d bytes, end %v; want %d chunks, %d bytes, ended by %v",
					sent, e.Stats.Chunks, e.Stats.Bytes, e.Reason, chunks, bytes, want)
			}
		})
	}
}

// Node's http module sends a handler's usage chunk, [DONE] and res.end()'s
// terminator, written in one tick, in one writev of nine buffers. Where
// the kernel's copy of a write is read (6.2+, fentry and tp_btf), the
// write's last bytes go to user space from it, the usage chunk with them.
// Where the writer's memory is read, nine buffers are past the window of
// eight (TestNodeQueueEndsAtItsTerminator): the usage is not read, as
// docs/genai.md says, and the counts are the server's all the same.
func TestUsageGatheredWithTheEnd(t *testing.T) {
	bpftest.Require(t)
	last := append(append(nodeChunk(llmwire.VLLMChatUsage), nodeChunk(llmwire.SSEDone)...), []byte(llmwire.LastChunk))
	writes := [][][]byte{frame("data: 0\n\n"), frame("data: 1\n\n"), last}
	port := writesServer(t, writes)
	rec := trace(t, port)
	tr := rec.tr
	sent := sentHook(t, tr)
	before := counters(t, tr)
	conn := getEvents(t, port)
	// The stream ends at its terminator where it is found, else at this
	// close; the counters are read after the end, which the write's
	// program reports after counting.
	conn.Close()
	streams := rec.ends(t, 1)
	after := counters(t, tr)
	fromCopy := tr.tailReason == nil && after.TailFromUser == before.TailFromUser
	want := EndTerminator
	if sent != hook.Fentry && sent != hook.Kprobe && !fromCopy {
		want = EndClientClosed // the terminator is past the window too
	}
	e := requireCompleted(t, streams, 1)[0]
	if n := 2*size(frame("data: 0\n\n")) + size(last); e.Stats.Chunks != 3 || e.Stats.Bytes != n || e.Reason != want {
		t.Errorf("sent by %s: %d chunks, %d bytes, end %v; want 3 chunks, %d bytes, ended by %v",
			sent, e.Stats.Chunks, e.Stats.Bytes, e.Reason, n, want)
	}
	var tails [][]byte
	for _, r := range streams[e.ID] {
		if r.Kind == KindBody && r.Flags&BodyTail != 0 {
			tails = append(tails, r.Data)
		}
	}
	if !fromCopy {
		// The writer's memory: through the iterator (fexit, kretprobe)
		// the last four buffers, [DONE]'s; at the other hooks none.
		t.Logf("sent by %s, tails from %s: the usage is not read (tails %q)", sent, tr.TailSource(), tails)
		for _, tail := range tails {
			if bytes.Contains(tail, []byte(`"usage"`)) {
				t.Errorf("tail %q holds the usage, read from the writer's memory; docs/genai.md says it is past the window", tail)
			}
		}
		return
	}
	if len(tails) != 1 || !bytes.Equal(tails[0], bytes.Join(last, nil)) {
		t.Errorf("tails %q; want one, the last write's %d bytes", tails, size(last))
	}
}

// getEvents sends a GET of /v1/events to port on 127.0.0.1 and reads
// its chunked answer to the end; the connection stays open.
func getEvents(t *testing.T, port uint16) net.Conn {
	t.Helper()
	conn := dialRaw(t, fmt.Sprintf("127.0.0.1:%d", port))
	io.WriteString(conn, "GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
	readChunked(t, bufio.NewReader(conn))
	return conn
}

// counters returns the kernel's counters of tr.
func counters(t *testing.T, tr *Tracer) Counters {
	t.Helper()
	c, err := tr.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sentHook is the hook type that attached for writes.
func sentHook(t *testing.T, tr *Tracer) hook.Kind {
	t.Helper()
	k := tr.sentKind()
	if k == "" {
		t.Fatalf("no hook attached for %s: %v", PointSent, tr.HookPoints())
	}
	return k
}

// Node's http module, plaintext, as it runs: each stream's last event and
// res.end()'s terminator go out in one writev of five buffers, one more
// than the programs copy. Three streams on one keep-alive connection each
// end at their terminator with the server's own counts, and the [DONE]
// event is no chunk. Each one's first event reaches user space
// (checkPlainStream), though no buffer starts with it: the head goes out
// with the first event (head and size line, CRLF, event, CRLF), or, for
// the second stream, on its own first (res.flushHeaders()), and the first
// event in a writev that starts with its size line.
func TestNodeStreamsEndAtTheirTerminator(t *testing.T) {
	bpftest.Require(t)
	srv := teststack.ServeStack(t, teststack.StackNodeHTTP, teststack.StackOptions{Events: 4,
		Think: 10 * time.Millisecond, Interval: 5 * time.Millisecond})
	rec := trace(t, uint16(srv.Port))
	client := &teststack.SDKClient{SDK: teststack.SDKPython, Addr: srv.Addr}
	defer client.Close()
	var sent []uint64
	for i := range 3 {
		sent = append(sent, teststack.MonotonicNow())
		req := teststack.ChatRequest{Model: "llama-3-8b", Stream: true}
		if i == 1 {
			req.Path = "/v1/chat/completions?flush_headers=1"
		}
		res, err := client.Chat(req)
		if err != nil || !res.Done || res.Reused != (i > 0) {
			t.Fatalf("request %d: %v; done %v, on a reused connection %v", i, err, res.Done, res.Reused)
		}
	}
	streams, ends := endsOf(t, rec, len(sent))
	reps := reportsOf(t, srv, len(sent))
	for i, end := range ends {
		checkPlainStream(t, streams[end.ID], end, reps[i], sent[i], false)
		// Where the first event went: with the head, or, after
		// flushHeaders, in the first body write's record.
		head, headerLen := headOf(t, streams[end.ID])
		body, _ := firstBody(streams[end.ID])
		ev := []byte(teststack.OpenAIEvent(0))
		if inHead := bytes.Contains(head.Data[headerLen:], ev); inHead != (i != 1) || bytes.Contains(body, ev) == inHead {
			t.Errorf("stream %d: first event in the head record %v, in the first body record %v; want it in the %s",
				i, inHead, bytes.Contains(body, ev), map[bool]string{true: "head", false: "body"}[i != 1])
		}
	}
}

// With streams.response_details off, a plaintext Node stream's first
// event stays in the kernel: the head record holds the head's buffer alone
// (the head and the size line), and no body record is sent. (Over TLS,
// Node hands OpenSSL one buffer per write, the head with the first event.)
func TestNodeResponseDetailsOff(t *testing.T) {
	bpftest.Require(t)
	srv := teststack.ServeStack(t, teststack.StackNodeHTTP, teststack.StackOptions{Events: 3,
		Think: 10 * time.Millisecond, Interval: 5 * time.Millisecond})
	cfg := testConfig(uint16(srv.Port))
	cfg.NoResponseBodies = true
	_, rec := traceWith(t, cfg)
	client := &teststack.SDKClient{SDK: teststack.SDKPython, Addr: srv.Addr}
	defer client.Close()
	if res, err := client.Chat(teststack.ChatRequest{Model: "llama-3-8b", Stream: true}); err != nil || !res.Done {
		t.Fatalf("%v; done %v", err, res.Done)
	}
	streams, ends := endsOf(t, rec, 1)
	recs := streams[ends[0].ID]
	head, headerLen := headOf(t, recs)
	if size := fmt.Sprintf("%x", len(teststack.OpenAIEvent(0))); string(head.Data[headerLen:]) != size {
		t.Errorf("head record's bytes after the headers %q, want the size line %q alone", head.Data[headerLen:], size)
	}
	for _, r := range recs {
		if r.Kind == KindBody {
			t.Errorf("body record %q with response details off", r.Data)
		}
	}
}
