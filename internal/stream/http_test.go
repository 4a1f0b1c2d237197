package stream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// HTTP as servers really write it: interim responses, pipelining,
// gathered writes, trailers, early closes and peeks. Each test knows
// exactly what the wire carried and checks the kernel's records against
// it.

// sseEvents is a net/http handler that flushes its head, then streams n
// events of one byte of payload each, apart by more than the coalescing
// window, then returns. With the head on its own, every event is one of
// the kernel's chunks.
func sseEvents(n int, beforeHead func(http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if beforeHead != nil {
			beforeHead(w)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for i := range n {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(3 * time.Millisecond)
		}
	}
}

// heads returns the RESPONSE records' first lines, in order.
func heads(recs []Record) []string {
	var out []string
	for _, r := range recs {
		if r.Kind == KindResponse {
			line, _, _ := bytes.Cut(r.Data, []byte("\r\n"))
			out = append(out, string(line))
		}
	}
	return out
}

// kinds lists the kinds of recs, in order.
func kinds(recs []Record) []Kind {
	out := make([]Kind, len(recs))
	for i, r := range recs {
		out[i] = r.Kind
	}
	return out
}

func requestBytes(recs []Record) []byte {
	var out []byte
	for _, r := range recs {
		if r.Kind == KindRequest {
			out = append(out, r.Data...)
		}
	}
	return out
}

// dialRaw connects to the test server and arranges for the connection to
// be closed when the test ends.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readChunked reads one chunked response (head and body) from br.
func readChunked(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// Expect: 100-continue: the interim "100 Continue" is not the stream's
// head; the request (head and body, sent after the 100) is one request.
func TestInterimContinueIsNotTheHead(t *testing.T) {
	bpftest.Require(t)
	addr, port := serve(t, sseEvents(3, nil))
	rec := trace(t, port)
	c := dialRaw(t, addr)
	body := `{"messages":[{"role":"user","content":"hi"}],"model":"m-100"}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n", len(body))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue first, got %q (%v)", line, err)
	}
	br.ReadString('\n') // the interim head's blank line
	io.WriteString(c, body)
	if resp := readChunked(t, br); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	streams := rec.ends(t, 1)
	e := requireCompleted(t, streams, 1)[0]
	if h := heads(streams[e.ID]); len(h) != 1 || h[0] != "HTTP/1.1 200 OK" {
		t.Errorf("response heads %q, want only the 200", h)
	}
	if req := requestBytes(streams[e.ID]); !bytes.Contains(req, []byte(`"model":"m-100"`)) {
		t.Errorf("request %q: the body sent after the 100 is missing", req)
	}
	if e.Stats.Chunks != 3 || e.Reason != EndTerminator {
		t.Errorf("%d chunks, end %v; want 3 ended by the terminator", e.Stats.Chunks, e.Reason)
	}
}

// 103 Early Hints before the final head: one stream, headed by the 200.
func TestEarlyHintsAreNotTheHead(t *testing.T) {
	bpftest.Require(t)
	addr, port := serve(t, sseEvents(2, func(w http.ResponseWriter) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
	}))
	rec := trace(t, port)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/hints")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	streams := rec.ends(t, 1)
	e := requireCompleted(t, streams, 1)[0]
	if h := heads(streams[e.ID]); len(h) != 1 || h[0] != "HTTP/1.1 200 OK" {
		t.Errorf("response heads %q, want only the 200", h)
	}
	if e.Stats.Chunks != 2 || e.Reason != EndTerminator {
		t.Errorf("%d chunks, end %v; want 2 ended by the terminator", e.Stats.Chunks, e.Reason)
	}
}

// Pipelined requests on one connection are separate streams, each from
// its own request: sent together, the second while the first response is
// still being written, and the second in two segments (a request's body
// written after its head, as HTTP clients do), which is one request, not
// two: the first stream still ends at its terminator.
func TestPipelinedRequestsAreSeparateStreams(t *testing.T) {
	bpftest.Require(t)
	for _, c := range []struct {
		name        string
		late, split bool
	}{
		{"sent together", false, false},
		{"second sent during the first response", true, false},
		{"second sent during the first response in two segments", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The first response's events wait for the client's
			// second request: nothing is written between its segments.
			release := make(chan struct{})
			if !c.late {
				close(release)
			}
			srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-release
				for i := range 4 {
					time.Sleep(3 * time.Millisecond)
					fmt.Fprintf(w, "data: %d\n\n", i)
					w.(http.Flusher).Flush()
				}
			})
			addr, port := serve(t, srv)
			rec := trace(t, port)
			conn := dialRaw(t, addr)
			req := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n" }
			post := "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 16\r\n\r\n"
			br := bufio.NewReader(conn)
			var sent2 uint64
			switch {
			case c.split:
				io.WriteString(conn, req("/one"))
				if _, err := br.Peek(1); err != nil { // the first response's head
					t.Fatal(err)
				}
				io.WriteString(conn, post)
				sent2 = teststack.MonotonicNow()
				io.WriteString(conn, `{"stream":true}`+"\n")
				close(release)
			case c.late:
				io.WriteString(conn, req("/one"))
				if _, err := br.Peek(1); err != nil {
					t.Fatal(err)
				}
				sent2 = teststack.MonotonicNow()
				io.WriteString(conn, req("/two"))
				close(release)
			default:
				io.WriteString(conn, req("/one")+req("/two"))
			}
			readChunked(t, br)
			readChunked(t, br)
			ends := requireCompleted(t, rec.ends(t, 2), 2)
			if ends[0].ID.Seq > ends[1].ID.Seq { // sent together, they share a request time
				ends[0], ends[1] = ends[1], ends[0]
			}
			for i, e := range ends {
				if e.Stats.Chunks != 4 || e.Reason != EndTerminator {
					t.Errorf("stream %d: %d chunks, end %v; want 4 ended by the terminator", i, e.Stats.Chunks, e.Reason)
				}
			}
			second := ends[1].Stats
			if c.late && second.RequestTS < sent2 {
				t.Errorf("second request stamped at %d, before its last bytes were sent (%d)", second.RequestTS, sent2)
			}
			if !c.late && second.RequestTS != ends[0].Stats.RequestTS {
				t.Errorf("requests sent together stamped %d and %d", ends[0].Stats.RequestTS, second.RequestTS)
			}
			if second.FirstChunkTS <= ends[0].Stats.EndTS {
				t.Errorf("second stream's first chunk %d before the first stream ended %d", second.FirstChunkTS, ends[0].Stats.EndTS)
			}
		})
	}
}

// A write reported after the client's next request reached the socket
// is still the response it was written for: here a thread-per-connection
// server's blocking write, which returns only once the client has read
// most of it, by when the client has sent its next request. The write
// is the sized body after its head, or the head and body together. The
// next stream is the next response alone: its head, its events, its
// terminator, timed from its request.
func TestWriteReportedAfterTheNextRequest(t *testing.T) {
	bpftest.Require(t)
	for _, c := range []struct {
		name  string
		whole bool // head and body in the blocking write
	}{
		{"body after its head", false},
		{"head and body in one write", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			const size = 16 << 20 // far more than the socket buffers hold
			head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
			addr, port, served := serveThenStream(t, func(conn *net.TCPConn) error {
				body := bytes.Repeat([]byte("x"), size)
				if c.whole {
					body = append([]byte(head), body...)
				} else {
					io.WriteString(conn, head)
				}
				if n, err := teststack.BlockingWrite(conn, body); err != nil || n != len(body) {
					return fmt.Errorf("blocking write: %d of %d bytes, %v", n, len(body), err)
				}
				return nil
			})
			rec := trace(t, port)
			conn := dialRaw(t, addr)
			sent1 := teststack.MonotonicNow()
			io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
			// Bytes past the head have come: the blocking write has begun,
			// and waits for this client to read.
			if err := teststack.AwaitUnread(conn.(*net.TCPConn), len(head)+1, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			sent2 := teststack.MonotonicNow()
			io.WriteString(conn, "GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != size {
				t.Fatalf("first body: %d of %d bytes, %v", n, size, err)
			}
			readChunked(t, br)
			if err := <-served; err != nil {
				t.Fatal(err)
			}
			streams := rec.ends(t, 2)
			ends := requireCompleted(t, streams, 2)
			if ends[0].ID.Seq > ends[1].ID.Seq {
				ends[0], ends[1] = ends[1], ends[0]
			}
			first, second := ends[0], ends[1]
			if first.Reason != EndNextRequest || first.Stats.RequestTS < sent1 || first.Stats.RequestTS > sent2 {
				t.Errorf("first stream: end %v, request at %d; want next_request, from its request (sent at %d, the next at %d)",
					first.Reason, first.Stats.RequestTS, sent1, sent2)
			}
			if h := heads(streams[first.ID]); len(h) != 1 || h[0] != "HTTP/1.1 200 OK" {
				t.Errorf("first stream's heads %q, want its 200", clip(h))
			}
			if h := heads(streams[second.ID]); len(h) != 1 || h[0] != "HTTP/1.1 200 OK" {
				t.Errorf("second stream's heads %q, want its own 200", clip(h))
			}
			if second.Stats.Chunks != 2 || second.Reason != EndTerminator || second.Stats.RequestTS < sent2 {
				t.Errorf("second stream: %d chunks, end %v, request at %d (sent at %d); want 2, terminator, from its request",
					second.Stats.Chunks, second.Reason, second.Stats.RequestTS, sent2)
			}
		})
	}
}

// A response sent with sendfile(2), whose write the kernel does not
// report before Linux 6.5 (it does not pass tcp_sendmsg_locked there),
// does not shift the connection's streams: the next request's response
// is that request's stream, its head, events, terminator and request
// time its own. From 6.5 the sendfile write is reported, as an opaque
// response that the next request ends.
func TestUnreportedResponseDoesNotShiftTheNextStream(t *testing.T) {
	bpftest.Require(t)
	file, err := os.CreateTemp(t.TempDir(), "response")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"object":"list","data":[{"id":"m"}]}`
	fmt.Fprintf(file, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	file.Close()
	addr, port, served := serveThenStream(t, func(c *net.TCPConn) error {
		f, err := os.Open(file.Name())
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = c.ReadFrom(f) // sendfile(2)
		return err
	})
	rec := trace(t, port)
	conn := dialRaw(t, addr)
	br := bufio.NewReader(conn)
	io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err != nil || string(got) != body {
		t.Fatalf("first body %q, %v", got, err)
	}
	sent2 := teststack.MonotonicNow()
	io.WriteString(conn, "GET /v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	readChunked(t, br)
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	streams := rec.ends(t, 2)
	var ends []Record // both streams', the first with no response where its write went unreported
	for _, recs := range streams {
		for _, r := range recs {
			if r.Kind == KindEnd {
				ends = append(ends, r)
			}
		}
	}
	if len(ends) != 2 {
		requireCompleted(t, streams, 2) // logs every record
		t.Fatalf("%d streams ended, want 2", len(ends))
	}
	if ends[0].ID.Seq > ends[1].ID.Seq {
		ends[0], ends[1] = ends[1], ends[0]
	}
	first, second := ends[0], ends[1]
	if first.Reason != EndNextRequest && first.Reason != EndNoResponse || first.Stats.RequestTS > sent2 {
		t.Errorf("first stream: end %v, request at %d; want next_request (reported) or no_response, from its request (the next sent at %d)",
			first.Reason, first.Stats.RequestTS, sent2)
	}
	if h := heads(streams[second.ID]); len(h) != 1 || h[0] != "HTTP/1.1 200 OK" {
		t.Errorf("second stream's heads %q, want its own 200", clip(h))
	}
	if second.Stats.Chunks != 2 || second.Reason != EndTerminator || second.Stats.RequestTS < sent2 {
		t.Errorf("second stream: %d chunks, end %v, request at %d (sent at %d); want 2, terminator, from its request",
			second.Stats.Chunks, second.Reason, second.Stats.RequestTS, sent2)
	}
	t.Logf("the sendfile response ended %v", first.Reason)
}

// A client's FIN that comes before the report of the write that ends its
// response: that write counts, and the stream ends with it, or at the FIN.
// The client half-closes once a blocking write has begun, and reads the
// rest: its FIN comes while the write waits for buffer space, as one from
// a client that read a whole response and closed can come before the
// write's report (sock_send_length fires after the socket is released).
//   - The whole response in that one write, sized: it is the stream's
//     response, which ends at the FIN (client_closed), not a stream with no
//     response.
//   - The chunked body's last chunk and terminator in that write, with
//     bytes of the request left unread: the terminator ends the stream,
//     and the FIN's wake-up of the socket, which finds those bytes, is no
//     request of a stream after it.
func TestFinBeforeTheReportOfTheResponse(t *testing.T) {
	bpftest.Require(t)
	const size = 16 << 20 // far more than the socket buffers hold
	request := "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
	sized := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
	chunked := []byte(teststack.ChunkFramed(strings.Repeat("x", size)) + "0\r\n\r\n")
	for _, c := range []struct {
		name   string
		unread string // sent with the request, and not read before the response
		head   string
		body   []byte // the blocking write's; with the head when whole
		whole  bool
		reason EndReason
		chunks uint32
		bytes  uint64 // the stream's body bytes
	}{
		{name: "sized, in one write", head: sized, body: bytes.Repeat([]byte("x"), size), whole: true,
			reason: EndClientClosed},
		{name: "chunked, its end in one write, with request bytes unread", unread: "{}",
			head:   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
			body:   chunked,
			reason: EndTerminator, chunks: 1, bytes: uint64(len(chunked))},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, port, served := teststack.ServeConn(t, func(conn *net.TCPConn) error {
				if _, err := io.ReadFull(conn, make([]byte, len(request))); err != nil {
					return err
				}
				body := c.body
				if c.whole {
					body = append([]byte(c.head), body...)
				} else if _, err := io.WriteString(conn, c.head); err != nil {
					return err
				}
				if n, err := teststack.BlockingWrite(conn, body); err != nil || n != len(body) {
					return fmt.Errorf("blocking write: %d of %d bytes, %v", n, len(body), err)
				}
				// Up to the client's EOF: a close with bytes unread would reset.
				if rest, err := io.ReadAll(conn); err != nil || string(rest) != c.unread {
					return fmt.Errorf("after the response: %q, %v; want %q and the client's EOF", rest, err, c.unread)
				}
				return nil
			})
			rec := trace(t, port)
			conn := dialRaw(t, addr).(*net.TCPConn)
			sent := teststack.MonotonicNow()
			io.WriteString(conn, request+c.unread)
			if err := teststack.AwaitUnread(conn, len(c.head)+1, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			fin := teststack.MonotonicNow()
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			// Half the body read: the FIN has come, and the write, which
			// waits for this client to read all but a socket buffer of
			// it, has not returned.
			n, err := io.CopyN(io.Discard, resp.Body, size/2)
			half := teststack.MonotonicNow()
			if err == nil {
				var m int64
				m, err = io.Copy(io.Discard, resp.Body)
				n += m
			}
			if err != nil || n != size {
				t.Fatalf("body: %d of %d bytes, %v", n, size, err)
			}
			if err := <-served; err != nil {
				t.Fatal(err)
			}
			streams := rec.ends(t, 1)
			end := requireCompleted(t, streams, 1)[0]
			if len(streams) != 1 {
				t.Errorf("%d streams, want 1", len(streams))
				for id, recs := range streams {
					t.Logf("stream %v:", id)
					for _, r := range recs {
						t.Logf("  %v reason %v stats %+v", r.Kind, r.Reason, r.Stats)
					}
				}
			}
			if h := heads(streams[end.ID]); len(h) != 1 || h[0] != "HTTP/1.1 200 OK" {
				t.Errorf("heads %q, want the response's 200", clip(h))
			}
			// The write's report ends the stream at the FIN.
			if end.Reason != c.reason || end.Stats.EndTS < fin || end.Stats.EndTS > half {
				t.Errorf("end %v at %d; want %v at the FIN (sent at %d, half the body read at %d)",
					end.Reason, end.Stats.EndTS, c.reason, fin, half)
			}
			headBytes := len(c.head)
			if c.whole {
				headBytes += len(c.body)
			}
			if end.Stats.Chunks != c.chunks || end.Stats.Bytes != c.bytes || end.Stats.HeadBytes != uint32(headBytes) {
				t.Errorf("%d chunks, %d body bytes, head write %d bytes; want %d, %d, %d",
					end.Stats.Chunks, end.Stats.Bytes, end.Stats.HeadBytes, c.chunks, c.bytes, headBytes)
			}
			if end.Stats.RequestTS < sent || end.Stats.RequestTS > fin {
				t.Errorf("request at %d; want from the request (sent at %d)", end.Stats.RequestTS, sent)
			}
		})
	}
}

// A client that closes after its response, with bytes of its request the
// server did not read: the FIN's wake-up of the socket, which finds those
// bytes, is no request, so the connection has one stream.
func TestFinWithRequestBytesUnreadIsNoRequest(t *testing.T) {
	bpftest.Require(t)
	request := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
	addr, port, served := teststack.ServeConn(t, func(conn *net.TCPConn) error {
		if _, err := io.ReadFull(conn, make([]byte, len(request))); err != nil {
			return err
		}
		for _, w := range []string{
			"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
			teststack.ChunkFramed("data: a\n\n"),
			"0\r\n\r\n",
		} {
			time.Sleep(3 * time.Millisecond)
			if _, err := io.WriteString(conn, w); err != nil {
				return err
			}
		}
		// The body stays unread until the client's FIN has come.
		if err := teststack.AwaitPeerClose(conn, 10*time.Second); err != nil {
			return err
		}
		if rest, err := io.ReadAll(conn); err != nil || string(rest) != "{}" {
			return fmt.Errorf("after the response: %q, %v; want the body and the client's EOF", rest, err)
		}
		return nil
	})
	rec := trace(t, port)
	conn := dialRaw(t, addr)
	io.WriteString(conn, request+"{}")
	readChunked(t, bufio.NewReader(conn))
	conn.Close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	rec.ends(t, 1)
	time.Sleep(200 * time.Millisecond) // a stream begun by the FIN would end at the server's close
	streams := rec.ends(t, 1)
	end := requireCompleted(t, streams, 1)[0]
	if len(streams) != 1 || end.Reason != EndTerminator || end.Stats.Chunks != 1 {
		t.Errorf("%d streams, the response's ended %v with %d chunks; want 1, ended by its terminator with 1", len(streams), end.Reason, end.Stats.Chunks)
		for id, recs := range streams {
			for _, r := range recs {
				t.Logf("stream %v: %v reason %v stats %+v", id, r.Kind, r.Reason, r.Stats)
			}
		}
	}
}

// The client's FIN with nothing written yet for its request: a client
// that half-closes (shutdown(SHUT_WR)) and waits for its answer. The
// answer, written after the FIN, is the stream's response, and ends as any
// does; no answer: no response at the close. TestClosedClientsAnswer is
// the client that closed and gave up.
func TestFinBeforeTheAnswer(t *testing.T) {
	bpftest.Require(t)
	events := []string{teststack.ChunkFramed("data: a\n\n"), teststack.ChunkFramed("data: b\n\n"), "0\r\n\r\n"}
	for _, c := range []finCase{
		{name: "half-closed, sized", writes: []string{finSized}, reason: EndClose},
		{name: "half-closed, chunked",
			writes: append([]string{"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"}, events...),
			reason: EndTerminator, chunks: 2, bytes: uint64(len(strings.Join(events, "")))},
		{name: "half-closed, no answer", reason: EndNoResponse},
	} {
		t.Run(c.name, func(t *testing.T) { finBeforeTheAnswer(t, c) })
	}
}

// The client's FIN with nothing written yet for its request, from a
// client that closed and gave up: its kernel resets the answer, written
// after the FIN, and the stream ends then (reset), or with no response
// when the reset came before the answer's report (tracepoints report a
// write once the socket is released, and on loopback the reset is in by
// then). What differs between hook types is this order, so this case runs
// under every forced type, the half-closed ones (TestFinBeforeTheAnswer)
// in the default run.
func TestClosedClientsAnswer(t *testing.T) {
	bpftest.Require(t)
	finBeforeTheAnswer(t, finCase{name: "closed", closed: true, writes: []string{finSized}, reason: EndReset})
}

const (
	finRequest = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	finSized   = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
)

// finCase is a request followed by the client's FIN, then an answer.
type finCase struct {
	name   string
	closed bool     // the client closes, where the others half-close
	writes []string // the answer, each its own write
	reason EndReason
	chunks uint32
	bytes  uint64 // the stream's body bytes
}

// finBeforeTheAnswer sends c's request, the client's FIN (a half-close,
// or a close), then c's answer, and checks the stream's end.
func finBeforeTheAnswer(t *testing.T, c finCase) {
	t.Helper()
	read := make(chan struct{})
	var finSeen uint64 // when the server saw the FIN
	addr, port, served := teststack.ServeConn(t, func(conn *net.TCPConn) error {
		if _, err := io.ReadFull(conn, make([]byte, len(finRequest))); err != nil {
			return err
		}
		close(read)
		if err := teststack.AwaitPeerClose(conn, 10*time.Second); err != nil {
			return err
		}
		finSeen = teststack.MonotonicNow()
		for _, w := range c.writes {
			time.Sleep(3 * time.Millisecond)
			if _, err := io.WriteString(conn, w); err != nil {
				return err
			}
		}
		if !c.closed {
			return nil
		}
		// The client's kernel resets what reaches its closed socket.
		if err := teststack.AwaitReset(conn, 10*time.Second); err != nil {
			return err
		}
		if _, err := io.WriteString(conn, finSized); err == nil {
			return fmt.Errorf("a write after the client's reset succeeded")
		}
		return nil
	})
	rec := trace(t, port)
	conn := dialRaw(t, addr).(*net.TCPConn)
	sent := teststack.MonotonicNow()
	if _, err := io.WriteString(conn, finRequest); err != nil {
		t.Fatal(err)
	}
	select {
	case <-read:
	case err := <-served:
		t.Fatalf("the server returned before it read the request: %v", err)
	}
	readBy := teststack.MonotonicNow()
	var answer []byte
	if c.closed {
		conn.Close()
	} else {
		if err := conn.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		var err error
		if answer, err = io.ReadAll(conn); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !c.closed && string(answer) != strings.Join(c.writes, "") {
		t.Fatalf("the client read %q; want the answer", answer)
	}
	streams := rec.allEnds(t, 1)
	var end Record
	var reported bool // the answer's write was reported before the stream ended
	for _, recs := range streams {
		if last := recs[len(recs)-1]; last.Kind == KindEnd {
			end = last
		}
		reported = slices.Contains(kinds(recs), KindResponse)
		t.Logf("records: %v", kinds(recs))
	}
	want, answered := c.reason, len(c.writes) > 0
	if c.closed && !reported {
		want, answered = EndNoResponse, false
	}
	if len(streams) != 1 || end.Reason != want {
		for id, recs := range streams {
			for _, r := range recs {
				t.Logf("stream %v: %v reason %v stats %+v", id, r.Kind, r.Reason, r.Stats)
			}
		}
		t.Fatalf("%d streams, one ended %v; want 1, ended %v", len(streams), end.Reason, want)
	}
	if end.Stats.RequestTS < sent || end.Stats.RequestTS > readBy {
		t.Errorf("request at %d; want from the request (sent at %d, read by %d)", end.Stats.RequestTS, sent, readBy)
	}
	if end.Stats.EndTS < finSeen {
		t.Errorf("end at %d; want after the FIN was seen (%d)", end.Stats.EndTS, finSeen)
	}
	// An END written at the close: the socket had given its port back.
	if end.Stats.Local.Port() != port {
		t.Errorf("the END's local port %d, want the server's %d", end.Stats.Local.Port(), port)
	}
	if !answered {
		if end.Stats.HeadersTS != 0 {
			t.Errorf("head at %d; want none", end.Stats.HeadersTS)
		}
		return
	}
	if h := heads(streams[end.ID]); len(h) != 1 || h[0] != "HTTP/1.1 200 OK" {
		t.Errorf("heads %q, want the answer's 200", clip(h))
	}
	if end.Stats.HeadersTS < finSeen || end.Stats.Chunks != c.chunks || end.Stats.Bytes != c.bytes ||
		end.Stats.HeadBytes != uint32(len(c.writes[0])) {
		t.Errorf("head at %d, %d chunks, %d body bytes, head write %d bytes; want after the FIN (seen at %d), %d, %d, %d",
			end.Stats.HeadersTS, end.Stats.Chunks, end.Stats.Bytes, end.Stats.HeadBytes, finSeen, c.chunks, c.bytes, len(c.writes[0]))
	}
}

// serveThenStream serves one connection on a free 127.0.0.1 port and
// answers its first request with first, its second with a chunked SSE
// stream: the head, two events 3 ms apart and the terminator, each its own
// write. The channel gets the answer's error.
func serveThenStream(t *testing.T, first func(*net.TCPConn) error) (addr string, port uint16, served <-chan error) {
	t.Helper()
	return teststack.ServeConn(t, func(c *net.TCPConn) error {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return err
		}
		if err := first(c); err != nil {
			return err
		}
		if _, err := http.ReadRequest(br); err != nil {
			return err
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for _, ev := range []string{"data: a\n\n", "data: b\n\n"} {
			time.Sleep(3 * time.Millisecond)
			io.WriteString(c, teststack.ChunkFramed(ev))
		}
		time.Sleep(3 * time.Millisecond)
		_, err := io.WriteString(c, "0\r\n\r\n")
		return err
	})
}

// clip shortens lines to 40 bytes for a failure's message.
func clip(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l[:min(len(l), 40)]
	}
	return out
}

// A client that closes right after the [DONE] event, before the final
// zero-length chunk (the kernel answers the server's terminator with a
// reset): its FIN is no request, so every stream is counted once.
func TestEarlyCloseMakesNoGhostStream(t *testing.T) {
	bpftest.Require(t)
	srv := &teststack.SSEServer{Think: time.Millisecond, Interval: 3 * time.Millisecond, Events: 3, Done: teststack.DoneFlushed, HeadersFirst: true}
	addr, port := serve(t, srv)
	rec := trace(t, port)
	const n = 20
	for range n {
		c := dialRaw(t, addr)
		io.WriteString(c, "GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(line, "data: [DONE]") {
				break
			}
		}
		c.Close()
	}
	rec.ends(t, n)
	time.Sleep(200 * time.Millisecond) // a ghost would end after the reset
	streams := rec.ends(t, n)
	ends := requireCompleted(t, streams, n)
	for _, e := range ends {
		// [DONE] ends the stream, except when the client's FIN lands
		// between the server's release of the socket and the report of
		// the [DONE] write (seen once in the kernel matrix, under
		// emulation): then the FIN ends it, with the same 3 chunks.
		if e.Stats.Chunks != 3 || e.Reason != EndTerminator && e.Reason != EndClientClosed {
			t.Errorf("stream %v: %d chunks, end %v; want 3 ended by [DONE] (or the client's close)", e.ID, e.Stats.Chunks, e.Reason)
			logStream(t, rec.tr, streams[e.ID])
		}
	}
}

// logStream logs a stream's records and the tracer's counters (a shared
// tracer's: since the package's first test), for a failure that depends
// on what the kernel could read.
func logStream(t *testing.T, tr *Tracer, recs []Record) {
	t.Helper()
	for _, r := range recs {
		t.Logf("  %v at %d: flags %#x offset %d total %d reason %v stats %+v data %q", r.Kind, r.TS, r.Flags, r.Offset, r.Total, r.Reason, r.Stats, r.Data)
	}
	c, err := tr.Counters()
	t.Logf("  counters %+v (err %v)", c, err)
}

// An SSE response that is neither chunked nor sized (HTTP/1.0, or
// Connection: close) is ended by the server's close: every event is a
// chunk and the stream ends with the close.
func TestCloseDelimitedResponse(t *testing.T) {
	bpftest.Require(t)
	events := []string{"data: a\n\n", "data: b\n\n", "data: c\n\n", "data: d\n\n"}
	raw := teststack.ServeRaw(t, time.Millisecond, 3*time.Millisecond, events)
	addr, port := raw.Addr, raw.Port
	rec := trace(t, port)
	c := dialRaw(t, addr)
	io.WriteString(c, "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	body, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	e := requireCompleted(t, rec.ends(t, 1), 1)[0]
	headLen := bytes.Index(body, []byte("\r\n\r\n")) + 4
	if e.Stats.Chunks != uint32(len(events)) || e.Reason != EndClose ||
		uint64(len(body)-headLen) != e.Stats.Bytes {
		t.Errorf("%d chunks, %d bytes, end %v; want %d chunks, %d bytes, ended by the close",
			e.Stats.Chunks, e.Stats.Bytes, e.Reason, len(events), len(body)-headLen)
	}
}

// A server that peeks at the request (recv with MSG_PEEK) before reading
// it: the request is captured once.
func TestPeekedRequestIsCapturedOnce(t *testing.T) {
	bpftest.Require(t)
	const request = "GET /peeked HTTP/1.1\r\nHost: x\r\n\r\n"
	port := teststack.ServeOne(t, func(c *net.TCPConn) {
		buf := make([]byte, 512)
		waitQueued(c, buf, len(request))
		io.ReadFull(c, buf[:len(request)])
		answerOneEvent(c)
	})
	if got := capturedRequest(t, trace(t, port), port, request); string(got) != request {
		t.Errorf("request captured as %q, want it once: %q", got, request)
	}
}

// waitQueued waits until n bytes are queued on c (peeking into buf), so
// that the next read takes them all at once.
func waitQueued(c *net.TCPConn, buf []byte, n int) {
	rc, _ := c.SyscallConn()
	rc.Read(func(fd uintptr) bool {
		got, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_PEEK)
		return err != unix.EAGAIN && got == n
	})
}

// answerOneEvent writes a chunked SSE response of one event, 3 ms after
// its head and 3 ms before its terminator (more than the coalescing
// window), then reads until the client closes.
func answerOneEvent(c net.Conn) {
	io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
	time.Sleep(3 * time.Millisecond)
	io.WriteString(c, "8\r\ndata: x\n\r\n")
	time.Sleep(3 * time.Millisecond)
	io.WriteString(c, "0\r\n\r\n")
	io.Copy(io.Discard, c)
}

// capturedRequest sends request to the server on port over a new
// connection, reads its chunked answer, and returns what rec's tracer
// captured of the request of the one stream that completed.
func capturedRequest(t *testing.T, rec *recorder, port uint16, request string) []byte {
	t.Helper()
	c := dialRaw(t, fmt.Sprintf("127.0.0.1:%d", port))
	io.WriteString(c, request)
	readChunked(t, bufio.NewReader(c))
	streams := rec.ends(t, 1)
	e := requireCompleted(t, streams, 1)[0]
	return requestBytes(streams[e.ID])
}

// "chunked" in any case, anywhere in the first 512 bytes of a response's
// first write (all of it the program looks in), marks the response
// chunked: its body ends with a terminator. A word cut by the end of the
// write or of those 512 bytes does not, and neither do near misses or the
// word further on. The record carries the head up to 2 KiB whatever the
// program looked at. The write
// program reads a head into a per-CPU buffer, and the server writes every
// head from one CPU, in the cases' order: past a head's end the buffer
// holds what the case before left, a "\r" after case 3's "chunked" (a
// scan that compared the byte its 8-byte loads take past the 7 they test
// would miss the word) and a "d" after case 4's "chunke" (one that read a
// byte past the write would find a word there).
func TestChunkedAnywhereInTheHead(t *testing.T) {
	bpftest.Require(t)
	head := func(c int, headers string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Case: %d\r\n%s", c, headers)
	}
	// at is case c's head with "chunked" at byte off, after a padding header.
	at := func(c, off int) string {
		h := head(c, "X-Pad: ")
		return h + strings.Repeat("p", off-len(h)-len("\r\nTransfer-Encoding: ")) + "\r\nTransfer-Encoding: chunked\r\n\r\n"
	}
	cases := []struct {
		name   string
		writes []string
		want   bool
	}{
		{"lower case", []string{head(0, "transfer-encoding: chunked\r\n\r\n")}, true},
		{"upper case", []string{head(1, "TRANSFER-ENCODING: CHUNKED\r\n\r\n")}, true},
		{"mixed case", []string{head(2, "Transfer-Encoding: ChUnKeD\r\n\r\n")}, true},
		{"the write's last bytes", []string{head(3, "Transfer-Encoding: chunked"), "\r\n\r\n"}, true},
		{"cut by the write's end", []string{head(4, "Transfer-Encoding: chunke"), "d\r\n\r\n"}, false},
		{"the last of 512 bytes", []string{at(5, PeekMax-7)}, true},
		{"cut at 512 bytes", []string{at(6, PeekMax-6)}, false},
		{"near misses", []string{head(7, "X-A: chunkes\r\nX-B: chunk-ed\r\nX-C: hunked\r\nX-D: chunke\xe4\r\nContent-Length: 0\r\n\r\n")}, false},
		{"a head of 1.5 KiB", []string{head(8, "Transfer-Encoding: chunked\r\nX-Pad: "+strings.Repeat("p", 1500)+"\r\n\r\n")}, true},
		{"a head longer than the record", []string{head(9, "Transfer-Encoding: chunked\r\nX-Pad: "+strings.Repeat("p", 3000)+"\r\n\r\n")}, true},
		{"past the first 512 bytes", []string{at(10, 2*PeekMax)}, false},
	}
	writes := map[string][]string{}
	for i, c := range cases {
		writes[fmt.Sprintf("/%d", i)] = c.writes
	}
	srv := teststack.ServeScript(t, writes)
	rec := trace(t, srv.Port)
	for i := range cases {
		c := dialRaw(t, srv.Addr)
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		if _, err := io.Copy(io.Discard, c); err != nil { // until the server closes
			t.Fatal(err)
		}
	}
	byCase := map[int][]Record{}
	for _, recs := range rec.ends(t, len(cases)) {
		for _, r := range recs {
			_, after, ok := bytes.Cut(r.Data, []byte("X-Case: "))
			if r.Kind != KindResponse || !ok {
				continue
			}
			var c int
			if _, err := fmt.Sscanf(string(after), "%d", &c); err != nil {
				t.Fatalf("response head %q: %v", r.Data, err)
			}
			byCase[c] = append(byCase[c], r)
		}
	}
	for i, c := range cases {
		if len(byCase[i]) != 1 {
			t.Errorf("%s: %d response heads recorded, want 1", c.name, len(byCase[i]))
			continue
		}
		r := byCase[i][0]
		if want := min(len(c.writes[0]), HeadMax); len(r.Data) != want {
			t.Errorf("%s: %d bytes of the head recorded, want %d", c.name, len(r.Data), want)
		}
		switch {
		case r.Flags&RespHTTP == 0:
			t.Errorf("%s: flags %#x, not an HTTP head", c.name, r.Flags)
		case (r.Flags&RespChunked != 0) != c.want:
			t.Errorf("%s: chunked %v, want %v", c.name, r.Flags&RespChunked != 0, c.want)
		}
	}
}
