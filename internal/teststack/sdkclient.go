package teststack

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// SDKClient sends chat completions requests the way an official openai
// SDK does (header set, body layout, one keep-alive connection reused
// while the server keeps it open) and reads streamed responses event by
// event, timing each on arrival. It is not safe for concurrent use: like
// one SDK call at a time on one pooled connection.
type SDKClient struct {
	SDK     SDK
	Addr    string        // host:port (127.0.0.1 only)
	APIKey  string        // default sk-tokenwire-test
	Timeout time.Duration // per request; default 30 s
	// TLS, when set, speaks HTTPS with this configuration (crypto/tls).
	TLS *tls.Config

	conn   net.Conn
	br     *bufio.Reader
	reused bool // the kept connection carries the next request
}

// ChatResult is what the client saw of one request.
type ChatResult struct {
	Status    int
	Header    http.Header
	Request   []byte // the bytes sent: head and body
	Body      []byte // the response body with the chunked framing removed
	Events    int    // data events (SSE) or lines (NDJSON) before the end marker
	Done      bool   // saw the end marker: data: [DONE], or "done":true
	LocalPort int    // the client's port: client.port on a span
	Reused    bool   // sent on a connection an earlier request used
	Sent      time.Time
	// Arrivals are the events' arrival times after Sent (the request's
	// last byte written); Arrivals[0] is the client-side time to first
	// event.
	Arrivals []time.Duration
}

// FirstEvent is the client-side time to first event (0 if none came).
func (r ChatResult) FirstEvent() time.Duration {
	if len(r.Arrivals) == 0 {
		return 0
	}
	return r.Arrivals[0]
}

// Chat sends one request and reads the whole response.
func (c *SDKClient) Chat(req ChatRequest) (ChatResult, error) {
	body := chatBody(c.SDK, req)
	key := c.APIKey
	if key == "" {
		key = "sk-tokenwire-test"
	}
	res := ChatResult{Request: append(requestHead(c.SDK, c.Addr, key, req, len(body)), body...)}
	if err := c.send(res.Request); err != nil {
		return res, err
	}
	res.Reused = c.reused
	res.Sent = time.Now()
	res.LocalPort = c.conn.LocalAddr().(*net.TCPAddr).Port
	closing, err := c.read(&res)
	if err != nil || closing {
		c.Close()
	}
	return res, err
}

// send writes the request on the kept connection, or on a new one when
// there is none or the server has closed it while it was idle (as the
// SDKs' connection pools do).
func (c *SDKClient) send(request []byte) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if c.conn != nil {
		c.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
		_, err := c.br.Peek(1)
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
			c.Close() // closed by the server, or bytes nobody asked for
		}
	}
	c.reused = c.conn != nil
	if c.conn == nil {
		var conn net.Conn
		var err error
		if c.TLS != nil {
			conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.Addr, c.TLS)
		} else {
			conn, err = net.DialTimeout("tcp", c.Addr, 5*time.Second)
		}
		if err != nil {
			return err
		}
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	c.conn.SetDeadline(time.Now().Add(timeout))
	_, err := c.conn.Write(request)
	return err
}

// read parses the response and its body, line by line, and says whether
// the server closes the connection after it.
func (c *SDKClient) read(res *ChatResult) (closing bool, err error) {
	resp, err := http.ReadResponse(c.br, &http.Request{Method: http.MethodPost})
	if err != nil {
		return true, err
	}
	defer resp.Body.Close()
	res.Status, res.Header = resp.StatusCode, resp.Header
	if enc := resp.Header.Get("Content-Encoding"); enc != "" {
		return true, fmt.Errorf("compressed response (%s) not supported", enc)
	}
	ndjson := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson")
	streamed := ndjson || strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	lines := bufio.NewReader(resp.Body)
	for {
		line, err := lines.ReadBytes('\n')
		res.Body = append(res.Body, line...)
		if streamed && len(line) > 0 {
			at := time.Since(res.Sent)
			switch t := bytes.TrimSpace(line); {
			case ndjson && bytes.Contains(t, []byte(`"done":true`)), !ndjson && string(t) == "data: [DONE]":
				res.Done = true
			case ndjson && len(t) > 0, !ndjson && bytes.HasPrefix(t, []byte("data: ")):
				res.Events++
				res.Arrivals = append(res.Arrivals, at)
			}
		}
		if err == io.EOF {
			return resp.Close, nil
		}
		if err != nil {
			return true, err
		}
	}
}

// Close closes the client's connection (the next request opens a new
// one).
func (c *SDKClient) Close() error {
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn, c.br = nil, nil
	return err
}
