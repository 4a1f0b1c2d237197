package teststack

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWireServer: a large request read in small reads, answered with the
// given writes in order, twice on one keep-alive connection.
func TestWireServer(t *testing.T) {
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	srv := &WireServer{ReadSize: 1024, Respond: func(r WireRequest) WireResponse {
		return Writes(5*time.Millisecond, time.Millisecond, head, ChunkFramed("data: "+r.Target+"\n\n"), "0\r\n\r\n")
	}}
	port := ServeWire(t, srv)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	body := `{"messages":"` + strings.Repeat("m", 10<<10) + `","model":"x"}`
	for i := range 2 {
		resp, err := client.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions?i=%d", port, i), "application/json",
			strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("data: /v1/chat/completions?i=%d\n\n", i); err != nil || string(got) != want {
			t.Fatalf("request %d: body %q (%v), want %q", i, got, err, want)
		}
	}
	written := srv.WaitWritten(2, 5*time.Second)
	if len(written) != 2 {
		t.Fatalf("%d requests answered, want 2", len(written))
	}
	for _, w := range written {
		if string(w.Request.Body) != body || w.Reads < 10 || len(w.Before) != 3 || len(w.After) != 3 {
			t.Errorf("request of %d body bytes in %d reads, %d writes; want %d bytes in at least 10 reads, 3 writes",
				len(w.Request.Body), w.Reads, len(w.Before), len(body))
		}
		if w.Before[1]-w.After[0] < uint64(time.Millisecond) || w.Before[0]-w.Read < uint64(5*time.Millisecond) {
			t.Errorf("pauses not kept: read %d, writes %v-%v", w.Read, w.Before, w.After)
		}
	}
}

// TestReplay: a Python or Node stack hands its server the given events,
// each one HTTP/1.1 chunk: the client reads them back exactly.
func TestReplay(t *testing.T) {
	events := []string{"data: {\"a\":1}\n\n", "data: {\"b\":2}\n\n", "data: [DONE]\n\n"}
	for _, tc := range []struct {
		stack       Stack
		contentType string
	}{
		{StackFastAPI, "text/event-stream; charset=utf-8"},
		{StackNodeHTTP, "text/event-stream"},
		{StackExpress, "text/event-stream"},
	} {
		t.Run(string(tc.stack), func(t *testing.T) {
			srv := ServeStack(t, tc.stack, StackOptions{Replay: &Replay{MediaType: "text/event-stream", Events: events,
				Think: 20 * time.Millisecond, Interval: 5 * time.Millisecond}})
			resp, err := http.Post(srv.URL+"/v1/anything", "application/json", strings.NewReader(`{"model":"r"}`))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := strings.Join(events, ""); err != nil || string(got) != want || resp.Header.Get("Content-Type") != tc.contentType {
				t.Fatalf("body %q (%v), content type %q; want %q, %q", got, err, resp.Header.Get("Content-Type"), want, tc.contentType)
			}
			reps, err := srv.Reports(1, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r := reps[0]; r.Path != "/v1/anything" || r.Model != "r" || r.Events != 3 || !r.Done || len(r.EventNS) != 3 ||
				r.BodyBytes != len(strings.Join(events, "")) {
				t.Errorf("report %+v", r)
			}
		})
	}
}
