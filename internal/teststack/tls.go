package teststack

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSCert is a self-signed certificate for 127.0.0.1 and ::1 and its key,
// made when a test runs (no key is ever committed), in PEM files for
// servers and clients that read files, and as Go values.
type TLSCert struct {
	CertFile, KeyFile string // PEM
	Cert              tls.Certificate
	Pool              *x509.CertPool // trusts Cert
}

// NewTLSCert makes a certificate valid for an hour and writes it to dir.
func NewTLSCert(dir string) (*TLSCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "tokenwire test"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own issuer: clients trust it as the CA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &TLSCert{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(c.CertFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.KeyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if c.Cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	c.Pool = x509.NewCertPool()
	c.Pool.AppendCertsFromPEM(certPEM)
	return c, nil
}

// MakeTLSCert makes a certificate in a directory the test removes.
func MakeTLSCert(tb testing.TB) *TLSCert {
	tb.Helper()
	c, err := NewTLSCert(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// ServerConfig serves c over HTTP/1.1 (the stream probe reads HTTP/1.x;
// Go would otherwise offer HTTP/2 to clients that ask).
func (c *TLSCert) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.Cert}, NextProtos: []string{"http/1.1"}}
}

// ClientConfig trusts c and asks for HTTP/1.1.
func (c *TLSCert) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: c.Pool, NextProtos: []string{"http/1.1"}}
}

// HTTPClient is a Go client that trusts c, one keep-alive connection per
// host at most when oneConn is set.
func (c *TLSCert) HTTPClient(oneConn bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: c.ClientConfig(), ForceAttemptHTTP2: false}
	if oneConn {
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = 1, 1
	}
	return &http.Client{Transport: tr}
}

// HTTPClientReadingRecords is HTTPClient(true) whose connections read
// TLS as OpenSSL's socket BIO does (Python's ssl, curl): each record's
// 5-byte header in a read of its own, then its body, with pause between
// the two reads, as a client that is descheduled between them. The
// transport's TLSClientConfig is read at each dial.
func (c *TLSCert) HTTPClientReadingRecords(pause time.Duration) *http.Client {
	client := c.HTTPClient(true)
	tr := client.Transport.(*http.Transport)
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := tr.TLSClientConfig.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		conn := tls.Client(&recordReads{Conn: raw, pause: pause}, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
	return client
}

// recordReads is a connection whose reads return a TLS record's header
// alone, then its body, pausing before the body.
type recordReads struct {
	net.Conn
	pause time.Duration
	left  int // body bytes of the current record still to read
}

func (c *recordReads) Read(p []byte) (int, error) {
	if c.left == 0 {
		if len(p) < 5 {
			return 0, io.ErrShortBuffer
		}
		if _, err := io.ReadFull(c.Conn, p[:5]); err != nil {
			return 0, err
		}
		c.left = int(p[3])<<8 | int(p[4])
		return 5, nil
	}
	time.Sleep(c.pause)
	n, err := c.Conn.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

// StartHTTPS serves h over TLS with cert (HTTP/1.1 only) on a free
// 127.0.0.1 port until Close.
func StartHTTPS(cert *TLSCert, h http.Handler) (*HTTPServer, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &HTTPServer{Addr: ln.Addr().String(), Port: ln.Addr().(*net.TCPAddr).Port,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			// Not nil: no HTTP/2.
			TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}}}
	s.URL = "https://" + s.Addr
	go s.srv.Serve(tls.NewListener(ln, cert.ServerConfig()))
	return s, nil
}

// ServeHTTPS serves h over TLS on a free 127.0.0.1 port until the test
// ends.
func ServeHTTPS(tb testing.TB, cert *TLSCert, h http.Handler) *HTTPServer {
	tb.Helper()
	s, err := StartHTTPS(cert, h)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// LoadTLSCert reads a certificate that NewTLSCert wrote (another process
// made it: a server child and its parent's clients share it).
func LoadTLSCert(certFile, keyFile string) (*TLSCert, error) {
	c := &TLSCert{CertFile: certFile, KeyFile: keyFile}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	if c.Cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
	}
	c.Pool = x509.NewCertPool()
	if !c.Pool.AppendCertsFromPEM(certPEM) {
		return nil, fmt.Errorf("%s: no certificate", certFile)
	}
	return c, nil
}
