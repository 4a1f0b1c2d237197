package teststack

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSSEServerRecordsWhatItWrote: what the client reads is exactly the
// events the server recorded, each bracketed by its own monotonic stamps,
// with [DONE] per the done mode.
func TestSSEServerRecordsWhatItWrote(t *testing.T) {
	for _, done := range []DoneMode{DoneNone, DoneFlushed, DoneWithEnd} {
		t.Run(fmt.Sprint(done), func(t *testing.T) {
			srv := &SSEServer{Think: 20 * time.Millisecond, Interval: 2 * time.Millisecond, Events: 4,
				HeadersFirst: true, Done: done, Event: OpenAIEvent, Header: http.Header{"Cache-Control": {"no-cache"}}}
			hs := ServeHTTP(t, srv)
			client := &SDKClient{SDK: SDKPython, Addr: hs.Addr}
			defer client.Close()
			res, err := client.Chat(ChatRequest{Path: "/v1/chat/completions?id=a", Model: "m", Stream: true})
			if err != nil {
				t.Fatal(err)
			}
			var want string
			for i := range 4 {
				want += OpenAIEvent(i)
			}
			if done != DoneNone {
				want += DoneEvent
			}
			if string(res.Body) != want || res.Events != 4 || res.Done != (done != DoneNone) {
				t.Errorf("body %q (%d events, done %v), want %q", res.Body, res.Events, res.Done, want)
			}
			if res.Header.Get("Cache-Control") != "no-cache" {
				t.Errorf("extra header missing: %v", res.Header)
			}
			w, ok := srv.ByID("a")
			if !ok || len(w.Sizes) != 4 || len(w.Before) != 4 || len(w.After) != 4 || w.HeadAfter < w.HeadBefore {
				t.Fatalf("recorded %+v", w)
			}
			total := 0
			for i := range 4 {
				total += w.Sizes[i]
				if w.Before[i] > w.After[i] || (i > 0 && w.Before[i] < w.After[i-1]) {
					t.Errorf("event %d bracket [%d, %d] out of order", i, w.Before[i], w.After[i])
				}
			}
			if total != srv.EventBytes() || w.Sizes[0] != len(ChunkFramed(OpenAIEvent(0))) {
				t.Errorf("sizes %v add up to %d, EventBytes %d", w.Sizes, total, srv.EventBytes())
			}
			if think := w.First().Sub(w.Start); think < 20*time.Millisecond {
				t.Errorf("first event %v after the start, before the think time", think)
			}
		})
	}
}

// TestSSEServerPlainUnlessStreamed: a request that does not ask for a
// stream gets one JSON body with a Content-Length; bad JSON gets 400.
func TestSSEServerPlainUnlessStreamed(t *testing.T) {
	srv := &SSEServer{Events: 2, PlainUnlessStreamed: true}
	hs := ServeHTTP(t, srv)
	client := &SDKClient{SDK: SDKNode, Addr: hs.Addr}
	defer client.Close()
	res, err := client.Chat(ChatRequest{Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || res.Header.Get("Content-Length") == "" || string(res.Body) != plainReply {
		t.Errorf("plain reply: %d %v %q", res.Status, res.Header, res.Body)
	}
	resp, err := http.Post(hs.URL+"/", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad JSON: status %d", resp.StatusCode)
	}
	if n := len(srv.Written()); n != 0 {
		t.Errorf("%d streams recorded for requests that asked for none", n)
	}
}

// TestSDKRequestLayout: both SDKs put "messages" before "model" and send
// the Stainless headers and an Authorization header; the body's length is
// the Content-Length.
func TestSDKRequestLayout(t *testing.T) {
	for sdk, wantBody := range map[SDK]string{
		SDKPython: `{"messages": [{"role": "user", "content": "hi"}], "model": "gpt-x", "stream": true}`,
		SDKNode:   `{"messages":[{"role":"user","content":"hi"}],"model":"gpt-x","stream":true}`,
	} {
		req := ChatRequest{Model: "gpt-x", Messages: []Message{{"user", "hi"}}, Stream: true, Header: [][2]string{{"traceparent", "00-x"}}}
		body := chatBody(sdk, req)
		if string(body) != wantBody {
			t.Errorf("%s body %s, want %s", sdk, body, wantBody)
		}
		head := strings.ToLower(string(requestHead(sdk, "127.0.0.1:1", "sk-1", req, len(body))))
		for _, h := range []string{"post /v1/chat/completions http/1.1\r\n", "x-stainless-lang: ", "x-stainless-package-version: ",
			"user-agent: openai/", "authorization: bearer sk-1\r\n", "connection: keep-alive\r\n", "traceparent: 00-x\r\n",
			fmt.Sprintf("content-length: %d\r\n", len(body))} {
			if !strings.Contains(head, h) {
				t.Errorf("%s head lacks %q:\n%s", sdk, h, head)
			}
		}
		if !bytes.HasSuffix([]byte(head), []byte("\r\n\r\n")) {
			t.Errorf("%s head does not end with a blank line", sdk)
		}
	}
}
