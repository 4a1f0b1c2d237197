package teststack

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// TestStackServers runs each Python and Node server for real on loopback
// in both formats, streams from it with an SDK-like client and checks the
// exact events and body against what the server reports it wrote.
func TestStackServers(t *testing.T) {
	for i, stack := range Stacks {
		for _, format := range []Format{FormatOpenAI, FormatOllama} {
			t.Run(fmt.Sprintf("%s/%s", stack, format), func(t *testing.T) {
				t.Parallel()
				const events = 5
				srv := ServeStack(t, stack, StackOptions{Format: format, Events: events,
					Think: 30 * time.Millisecond, Interval: 5 * time.Millisecond})
				sdk := []SDK{SDKPython, SDKNode}[i%2]
				client := &SDKClient{SDK: sdk, Addr: srv.Addr}
				defer client.Close()

				res, err := client.Chat(ChatRequest{Model: "m-" + string(stack), Stream: true})
				if err != nil {
					t.Fatal(err)
				}
				checkStreamed(t, res, format, events)
				// The same keep-alive connection, with fewer events asked
				// for in the query; then a plain (not streamed) reply.
				res2, err := client.Chat(ChatRequest{Path: "/v1/chat/completions?events=2", Model: "m2", Stream: true})
				if err != nil {
					t.Fatal(err)
				}
				checkStreamed(t, res2, format, 2)
				if !res2.Reused || res2.LocalPort != res.LocalPort {
					t.Errorf("second request on port %d (reused %v), first on %d: keep-alive not kept", res2.LocalPort, res2.Reused, res.LocalPort)
				}
				plain, err := client.Chat(ChatRequest{Model: "m3"})
				if err != nil {
					t.Fatal(err)
				}
				if plain.Status != 200 || plain.Events != 0 || !bytes.Equal(plain.Body, []byte(plainReply)) {
					t.Errorf("plain reply: status %d, %d events, body %q", plain.Status, plain.Events, plain.Body)
				}

				reps, err := srv.Reports(3, 10*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				for k, want := range []struct {
					model    string
					streamed bool
					events   int
					body     int
					req      []byte
				}{
					{"m-" + string(stack), true, events, len(res.Body), res.Request},
					{"m2", true, 2, len(res2.Body), res2.Request},
					{"m3", false, 0, len(plain.Body), plain.Request},
				} {
					r := reps[k]
					if r.Model != want.model || r.Streamed != want.streamed || r.Events != want.events ||
						r.BodyBytes != want.body || r.Done != want.streamed || len(r.EventNS) != want.events {
						t.Errorf("report %d: %+v; want model %s, streamed %v, %d events, %d body bytes", k, r, want.model, want.streamed, want.events, want.body)
					}
					if body := want.req[bytes.Index(want.req, []byte("\r\n\r\n"))+4:]; r.RequestBytes != len(body) {
						t.Errorf("report %d: server read %d request body bytes, client sent %d", k, r.RequestBytes, len(body))
					}
					if r.UserAgent == "" || !bytes.Contains(want.req, []byte(r.UserAgent)) {
						t.Errorf("report %d: user agent %q is not the one sent", k, r.UserAgent)
					}
					if r.Streamed && (r.EventNS[0] < r.StartNS || r.EndNS < r.EventNS[len(r.EventNS)-1]) {
						t.Errorf("report %d: times out of order: start %d, events %v, end %d", k, r.StartNS, r.EventNS, r.EndNS)
					}
				}
			})
		}
	}
}

// checkStreamed checks one streamed response against the format's exact
// body.
func checkStreamed(t *testing.T, res ChatResult, format Format, events int) {
	t.Helper()
	if res.Status != 200 || res.Events != events || !res.Done || len(res.Arrivals) != events {
		t.Errorf("status %d, %d events (%d arrivals), done %v; want 200, %d, done", res.Status, res.Events, len(res.Arrivals), res.Done, events)
	}
	if want := format.Body(events); string(res.Body) != want {
		t.Errorf("body %q, want %q", res.Body, want)
	}
	if res.FirstEvent() <= 0 {
		t.Errorf("time to first event %v", res.FirstEvent())
	}
}

// TestCurlAgainstAStack: curl's view of a stream from a Python server:
// the exact body, and a first byte no earlier than the think time.
func TestCurlAgainstAStack(t *testing.T) {
	RequireTool(t, "curl")
	const think = 100 * time.Millisecond
	srv := ServeStack(t, StackStarlette, StackOptions{Events: 3, Think: think, Interval: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Curl(ctx, srv.URL+"/v1/chat/completions", `{"model":"c","stream":true}`, "X-Test: 1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 200 || string(res.Body) != FormatOpenAI.Body(3) || res.LocalPort == 0 {
		t.Errorf("status %d, local port %d, body %q", res.Status, res.LocalPort, res.Body)
	}
	reps, err := srv.Reports(1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if reps[0].BodyBytes != len(res.Body) || reps[0].Events != 3 || reps[0].Model != "c" {
		t.Errorf("report %+v, curl read %d bytes", reps[0], len(res.Body))
	}
	if res.Total < think {
		t.Errorf("curl took %v, less than the think time %v", res.Total, think)
	}
}
