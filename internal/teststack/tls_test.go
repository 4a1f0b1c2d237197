package teststack

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestTLSStacks serves HTTPS from each Python and Node server with a
// certificate made by the test, and streams from it with every TLS client
// the tests use: curl, Node's https module and crypto/tls.
func TestTLSStacks(t *testing.T) {
	cert := MakeTLSCert(t)
	for _, stack := range []Stack{StackStarlette, StackNodeHTTP} {
		t.Run(string(stack), func(t *testing.T) {
			t.Parallel()
			srv := ServeStack(t, stack, StackOptions{Events: 3, Think: 10 * time.Millisecond,
				Interval: 5 * time.Millisecond, TLS: cert})
			if !strings.HasPrefix(srv.URL, "https://") || srv.Ready["tls"] == false || srv.Ready["tls"] == "" {
				t.Fatalf("URL %s, ready line %v: not TLS", srv.URL, srv.Ready)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			body := `{"model":"m","stream":true}`
			res, err := CurlWith(ctx, CurlOptions{CACert: cert.CertFile}, srv.URL+"/v1/chat/completions", body)
			if err != nil || res.Status != 200 || strings.Count(string(res.Body), "data: ") != 4 {
				t.Errorf("curl: %v, status %d, body %q", err, res.Status, res.Body)
			}
			RequireStack(t, StackNodeHTTP)
			nodes, err := NodeClient(ctx, srv.URL+"/v1/chat/completions", cert.CertFile, 2, body)
			if err != nil || len(nodes) != 2 {
				t.Fatalf("node client: %v, %+v", err, nodes)
			}
			for i, n := range nodes {
				if n.Status != 200 || n.Events != 3 || !n.Done || len(n.EventNS) != 3 || n.SentNS >= n.EventNS[0] || n.EventNS[2] > n.EndNS {
					t.Errorf("node request %d: %+v", i, n)
				}
			}
			if nodes[0].LocalPort != nodes[1].LocalPort {
				t.Errorf("node client used ports %d and %d: keep-alive not kept", nodes[0].LocalPort, nodes[1].LocalPort)
			}
			client := &SDKClient{SDK: SDKPython, Addr: srv.Addr, TLS: cert.ClientConfig()}
			defer client.Close()
			chat, err := client.Chat(ChatRequest{Model: "m", Stream: true})
			if err != nil || chat.Events != 3 || !chat.Done {
				t.Errorf("Go TLS client: %v, %+v", err, chat)
			}
			if reps, err := srv.Reports(4, 10*time.Second); err != nil || len(reps) != 4 {
				t.Errorf("reports: %v, %d", err, len(reps))
			}
		})
	}
}

// TestGoHTTPS serves the SSE handler over TLS with crypto/tls and reads it
// with a Go client that trusts the test's certificate.
func TestGoHTTPS(t *testing.T) {
	cert := MakeTLSCert(t)
	h := &SSEServer{Events: 3, Interval: time.Millisecond}
	srv := ServeHTTPS(t, cert, h)
	if !strings.HasPrefix(srv.URL, "https://") {
		t.Fatalf("URL %s", srv.URL)
	}
	if err := FetchAll(cert.HTTPClient(true), 2, "GET", srv.URL+"/", ""); err != nil {
		t.Fatal(err)
	}
	if got := len(h.Written()); got != 2 {
		t.Errorf("%d responses written, want 2", got)
	}
	if err := Fetch(nil, "GET", srv.URL+"/", ""); err == nil {
		t.Error("a client that does not trust the certificate was served")
	}
}
