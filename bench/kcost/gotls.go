package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// serveTLS is the gotls load's server, a child process of its own so that
// its CPU time is its own and only its crypto/tls calls are probed: the
// dense load's SSE server (teststack.SSEServer, net/http) over TLS. It
// prints "port N" once it listens and serves until SIGTERM.
func serveTLS(args []string) error {
	fs := flag.NewFlagSet("serve-tls", flag.ExitOnError)
	certFile := fs.String("cert", "", "PEM certificate (teststack.NewTLSCert)")
	keyFile := fs.String("key", "", "PEM key")
	events := fs.Int("events", 100, "events per stream")
	interval := fs.Duration("interval", 10*time.Millisecond, "time between events")
	fs.Parse(args)
	cert, err := teststack.LoadTLSCert(*certFile, *keyFile)
	if err != nil {
		return err
	}
	h := &teststack.SSEServer{Think: 10 * time.Millisecond, Interval: *interval, Events: *events,
		HeadersFirst: true, Done: teststack.DoneFlushed, Event: openAIChunk}
	srv, err := teststack.StartHTTPS(cert, h)
	if err != nil {
		return err
	}
	defer srv.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("port %d\n", srv.Port)
	<-sig
	return nil
}

// goTLSLoad is the dense load's Go server over TLS in a child process
// (serveTLS), and -gotls-streams client loops here that each keep one TLS
// connection and stream -gotls-chunks events -gotls-interval apart over
// it, request after request.
func goTLSLoad(tmp string) (*load, error) {
	dir, err := os.MkdirTemp(tmp, "gotls-") // the tls load writes its own cert.pem to tmp
	if err != nil {
		return nil, err
	}
	cert, err := teststack.NewTLSCert(dir)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p, err := teststack.StartProc(teststack.ProcOptions{Name: "kcost-gotls-server", Lines: true, Grace: 5 * time.Second},
		exe, "serve-tls", "-cert", cert.CertFile, "-key", cert.KeyFile,
		"-events", strconv.Itoa(*goTLSChunks), "-interval", goTLSIntv.String())
	if err != nil {
		return nil, err
	}
	line, err := p.WaitLine(30*time.Second, func(s string) bool { return strings.HasPrefix(s, "port ") })
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("the Go TLS server: %w\n%s", err, p.Tail(20))
	}
	port, err := strconv.Atoi(strings.TrimPrefix(line, "port "))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("the Go TLS server said %q", line)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l := &load{name: "gotls", port: port, serverPid: p.Pid(), stop: func() { p.Stop() },
		modes: []string{"tokenwire", "notls"},
		describe: fmt.Sprintf("the dense load's Go net/http SSE server over TLS in a process of its own (crypto/tls, TLS 1.3), %d Go clients each on one keep-alive connection, streams of %d events %v apart, %d-byte events",
			*goTLSStreams, *goTLSChunks, *goTLSIntv, len(openAIChunk(0)))}
	l.run = func(d time.Duration) (loadResult, error) {
		conns := make([]*tlsStreamConn, *goTLSStreams)
		defer func() {
			for _, c := range conns {
				if c != nil {
					c.close()
				}
			}
		}()
		r := loops(*goTLSStreams, d, func(i int, t *tally) {
			if conns[i] == nil {
				c, err := dialTLSStream(addr, cert.ClientConfig())
				if err != nil {
					t.add(0, 0, err)
					time.Sleep(10 * time.Millisecond)
					return
				}
				conns[i] = c
			}
			n, b, err := conns[i].stream(*goTLSChunks)
			t.add(n, b, err)
			if err != nil {
				conns[i].close()
				conns[i] = nil
				time.Sleep(10 * time.Millisecond)
			}
		})
		return r, nil
	}
	return l, nil
}

// tlsStreamConn is a client's keep-alive TLS connection to the Go server.
type tlsStreamConn struct {
	conn *tls.Conn
	br   *bufio.Reader
}

func dialTLSStream(addr string, cfg *tls.Config) (*tlsStreamConn, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp4", addr, cfg)
	if err != nil {
		return nil, err
	}
	return &tlsStreamConn{conn: c, br: bufio.NewReaderSize(c, 8192)}, nil
}

func (c *tlsStreamConn) close() { c.conn.Close() }

// stream asks for one stream and reads its chunked response to its end,
// counting its data events ([DONE] is not a chunk) and their bytes.
func (c *tlsStreamConn) stream(want int) (int, int64, error) {
	c.conn.SetDeadline(time.Now().Add(time.Duration(want)*(*goTLSIntv)*10 + 30*time.Second))
	if _, err := io.WriteString(c.conn, "GET /stream HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		return 0, 0, err
	}
	n, b := 0, int64(0)
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return n, b, fmt.Errorf("stream ended after %d of %d events: %v", n, want, err)
		}
		switch {
		case string(line) == "0\r\n": // the last chunk: the response's end
			if _, err := c.br.ReadSlice('\n'); err != nil {
				return n, b, err
			}
			if n < want {
				return n, b, fmt.Errorf("stream ended after %d of %d events", n, want)
			}
			return n, b, nil
		case len(line) > 6 && string(line[:6]) == "data: " && string(line) != "data: [DONE]\n":
			n++
			b += int64(len(line)) + 1 // the blank line after it
		}
	}
}
