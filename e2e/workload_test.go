//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// newServer is an OpenAI-compatible chat completions endpoint with known
// timing, streaming as vLLM does with stream_options.include_usage
// (chatEvent): a streamed request (`"stream": true`) gets its response
// head at once, then, after think, events SSE events interval apart (at
// least: sleeps are relative), then `data: [DONE]` one interval later,
// flushed as its own chunk. A request with `"stream": false` gets one JSON
// body with a Content-Length, which tokenwire must not count as a stream.
// The head goes out before the think time, as inference servers do: TTFT
// must then measure the first event, not the head.
func newServer(think, interval time.Duration, events int, model string) *teststack.SSEServer {
	return &teststack.SSEServer{Think: think, Interval: interval, Events: events,
		HeadersFirst: true, Done: teststack.DoneFlushed, Event: chatEvent(model),
		Header: http.Header{"Cache-Control": {"no-cache"}}, PlainUnlessStreamed: true}
}

// Tokens of each stream, as its usage chunk reports them.
const (
	promptTokens = 12
	outputTokens = events - 2 // one per token chunk
)

// chatEvent is the i-th event of a stream, in the shape of vLLM's chat
// completion chunks (internal/teststack/llmwire has vLLM's own): token
// chunks naming the model, a finish chunk as OpenAI's API writes it (its
// reason last, so that the probe sends its end), then the usage chunk.
func chatEvent(model string) func(int) string {
	prefix := `data: {"id":"chatcmpl-e2e","object":"chat.completion.chunk","created":1718000000,"model":"` + model + `",`
	return func(i int) string {
		switch i {
		case events - 1:
			return prefix + fmt.Sprintf(`"choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}`,
				promptTokens, promptTokens+outputTokens, outputTokens) + "\n\n"
		case events - 2:
			return prefix + `"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}` + "\n\n"
		}
		return prefix + fmt.Sprintf(`"choices":[{"index":0,"delta":{"content":"tok%03d"},"logprobs":null,"finish_reason":null}]}`, i) + "\n\n"
	}
}

// failedServer streams what vLLM writes when generation fails mid-stream
// (serving_chat.py, create_streaming_error_response): a first chunk, then
// an error event with the error's type, then [DONE]: tokenwire reports
// its duration with error.type and its span as an error.
func failedServer(think, interval time.Duration, model string) *teststack.SSEServer {
	ok := chatEvent(model)
	return &teststack.SSEServer{Think: think, Interval: interval, Events: 2, HeadersFirst: true, Done: teststack.DoneFlushed,
		Event: func(i int) string {
			if i == 1 {
				return `data: {"error":{"message":"The decoder prompt is too long","type":"BadRequestError","param":null,"code":400}}` + "\n\n"
			}
			return ok(i)
		}}
}

// failedType is the error.type of failedServer's streams.
const failedType = "BadRequestError"

// workload serves ok, and failed for requests with a fail query parameter.
func workload(ok, failed http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("fail") {
			failed.ServeHTTP(w, r)
			return
		}
		ok.ServeHTTP(w, r)
	})
}

// streamBytes is tokenwire.stream.bytes for one of the server's streams:
// every body byte written after the response head up to the end of the
// stream, chunked framing included: the events' chunks and the [DONE]
// event's chunk. The [DONE] write ends the stream (it is not a chunk, but
// its bytes are body bytes as written); the last-chunk "0\r\n\r\n" that
// net/http writes afterwards, when the handler returns, is past the end.
func streamBytes(s *teststack.SSEServer) int {
	return s.EventBytes() + teststack.ChunkedSize(len(teststack.DoneEvent))
}

// traceParent is a W3C trace context as a caller would send it.
type traceParent struct {
	TraceID [16]byte
	SpanID  [8]byte
}

func newTraceParent() traceParent {
	var tp traceParent
	_, _ = rand.Read(tp.TraceID[:])
	_, _ = rand.Read(tp.SpanID[:])
	return tp
}

// header is the traceparent header value (version 00, sampled).
func (tp traceParent) header() string {
	return "00-" + hex.EncodeToString(tp.TraceID[:]) + "-" + hex.EncodeToString(tp.SpanID[:]) + "-01"
}

// streamResult is what the client saw of one request.
type streamResult struct {
	LocalPort int  // the client's port: client.port on the span
	Events    int  // data events before [DONE]
	Done      bool // saw data: [DONE]
	// Client-side times from the moment the client had its connection,
	// before a byte of the request went out: tokenwire's server-side
	// TTFT and duration (request arrival to first write, to the
	// terminator's write) cannot exceed them, whatever the machine's load.
	TTFT     time.Duration // -> first event read
	Duration time.Duration // -> data: [DONE] read
	Status   int
	TP       *traceParent // sent, if any
}

// chatClient sends one request per connection (keep-alive off), so that
// every request is exactly one TCP handshake and one stream on its own
// socket, and the client port identifies the span.
func chatClient() *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
}

// chat posts one chat request and reads the whole response.
func chat(client *http.Client, url, model string, stream bool, tp *traceParent) (streamResult, error) {
	res := streamResult{TP: tp}
	body, _ := json.Marshal(map[string]any{
		"model":    model,
		"stream":   stream,
		"messages": []map[string]string{{"role": "user", "content": "hello"}},
	})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	req.Header.Set("Content-Type", "application/json")
	if tp != nil {
		req.Header.Set("traceparent", tp.header())
	}
	var began time.Time
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			began = time.Now()
			res.LocalPort = info.Conn.LocalAddr().(*net.TCPAddr).Port
		},
	}))
	resp, err := client.Do(req)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if !stream {
		_, err = io.Copy(io.Discard, resp.Body)
		return res, err
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "data: [DONE]":
			res.Done = true
			res.Duration = time.Since(began)
		case strings.HasPrefix(line, "data: "):
			if res.Events == 0 {
				res.TTFT = time.Since(began)
			}
			res.Events++
		}
	}
	return res, sc.Err()
}

// chatMany sends n requests at once and returns their results in order.
func chatMany(url, model string, n int, stream, withTraceParent bool) ([]streamResult, error) {
	client := chatClient()
	defer client.CloseIdleConnections()
	results := make([]streamResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		var tp *traceParent
		if withTraceParent {
			v := newTraceParent()
			tp = &v
		}
		wg.Go(func() {
			results[i], errs[i] = chat(client, url, model, stream, tp)
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// connectN makes n sequential connections to addr, closing each at once.
func connectN(addr string, n int) error {
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		c.Close()
	}
	return nil
}

// connectRefused makes n connections to a port nothing listens on and
// checks that each was refused (RST in reply to the SYN).
func connectRefused(addr string, n int) error {
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.Close()
			return fmt.Errorf("connect to %s succeeded; want connection refused", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("connect to %s: %w; want connection refused", addr, err)
		}
	}
	return nil
}

// slowHandshake makes one handshake that takes about one second, the way
// KERNEL.md describes: a listener with backlog 0 holds one connection in
// its accept queue; while that connection waits, the next SYN is dropped
// and the client retransmits it after its 1 s initial RTO. Accepting the
// first connection 200 ms in makes room for the retransmitted SYN. It
// returns the listener's port and how long the slow connect() took as the
// client saw it: tokenwire's client-role handshake must match that.
func slowHandshake() (port int, slow time.Duration, err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, 0, err
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return 0, 0, err
	}
	// Backlog 0: the accept queue is full with one connection in it.
	if err := syscall.Listen(fd, 0); err != nil {
		return 0, 0, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return 0, 0, err
	}
	port = sa.(*syscall.SockaddrInet4).Port
	addr := "127.0.0.1:" + strconv.Itoa(port)

	first, err := net.DialTimeout("tcp", addr, 5*time.Second) // fills the queue
	if err != nil {
		return port, 0, err
	}
	defer first.Close()
	type result struct {
		c   net.Conn
		d   time.Duration
		err error
	}
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		ch <- result{c, time.Since(start), err}
	}()
	time.Sleep(200 * time.Millisecond)
	nfd, _, err := syscall.Accept(fd) // make room for the retransmitted SYN
	if err != nil {
		return port, 0, err
	}
	syscall.Close(nfd)
	r := <-ch
	if r.err != nil {
		return port, 0, r.err
	}
	r.c.Close()
	return port, r.d, nil
}
