package teststack

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"
)

// HTTPServer is a net/http server on a loopback listener.
type HTTPServer struct {
	Addr string // host:port
	Port int
	URL  string // http://host:port
	srv  *http.Server
}

// StartHTTP serves h on addr ("127.0.0.1:0" when empty) until Close.
func StartHTTP(addr string, h http.Handler) (*HTTPServer, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		return nil, err
	}
	s := &HTTPServer{Addr: ln.Addr().String(), Port: ln.Addr().(*net.TCPAddr).Port,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	s.URL = "http://" + s.Addr
	go s.srv.Serve(ln)
	return s, nil
}

// ServeHTTP serves h on a free 127.0.0.1 port until the test ends.
func ServeHTTP(tb testing.TB, h http.Handler) *HTTPServer {
	tb.Helper()
	s, err := StartHTTP("", h)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Close closes the listener and every connection at once: open streams
// end as a reset or close, which is what the tests that use it expect.
func (s *HTTPServer) Close() error { return s.srv.Close() }

// Shutdown stops accepting and waits (at most timeout) for the requests
// in flight to finish.
func (s *HTTPServer) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// AcceptAndClose serves a 127.0.0.1 port that accepts connections and
// closes them at once (handshakes with no traffic), until the test ends.
func AcceptAndClose(tb testing.TB) (net.Listener, int) {
	tb.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	tb.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln, ln.Addr().(*net.TCPAddr).Port
}
