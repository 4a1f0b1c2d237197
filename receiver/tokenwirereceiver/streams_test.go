package tokenwirereceiver

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// sseServer streams events after a think time, like an OpenAI-compatible
// server; its [DONE] goes out with the chunked terminator.
func sseServer(think, interval time.Duration, events int) *teststack.SSEServer {
	return &teststack.SSEServer{Think: think, Interval: interval, Events: events, Done: teststack.DoneWithEnd,
		Event: func(i int) string {
			return fmt.Sprintf("data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
		}}
}

// streamConfig watches streams on port only (no handshakes), exporting
// every interval.
func streamConfig(port int, interval time.Duration) *Config {
	cfg := createDefaultConfig()
	cfg.CollectionInterval = interval
	cfg.Handshake.Enabled = false
	cfg.Streams.Ports = []int{port}
	cfg.Streams.FlushInterval = 100 * time.Millisecond
	return cfg
}

func TestStreamMetricsAndSpans(t *testing.T) {
	bpftest.Require(t)
	const think = 50 * time.Millisecond
	sse := sseServer(think, 10*time.Millisecond, 10)
	srv := teststack.ServeHTTP(t, sse)
	port := srv.Port

	cfg := streamConfig(port, 200*time.Millisecond)
	f := NewFactory()
	set := receivertest.NewNopSettings(metadata.Type)
	metrics, traces := new(consumertest.MetricsSink), new(consumertest.TracesSink)
	mr, err := f.CreateMetrics(context.Background(), set, cfg, metrics)
	require.NoError(t, err)
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	require.NoError(t, err)
	require.NoError(t, mr.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			require.NoError(t, mr.Shutdown(context.Background()))
			require.NoError(t, tr.Shutdown(context.Background()))
		}
	}
	defer stop()

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const streams = 3
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}} // one keep-alive socket
	// When each request's head was written (CLOCK_MONOTONIC), before it
	// reached the wire, and the longest time a client waited from then to
	// the first event (the head goes with it), for the log.
	var sentNS []uint64
	var clientTTFT time.Duration
	for range streams {
		req, err := http.NewRequest("POST", srv.URL+"/v1/chat/completions?stream=1",
			bytes.NewBufferString(`{"model":"llama-3-8b","stream":true}`))
		require.NoError(t, err)
		req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
		var sent time.Time
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteHeaders:         func() { sent = time.Now(); sentNS = append(sentNS, teststack.MonotonicNow()) },
			GotFirstResponseByte: func() { clientTTFT = max(clientTTFT, time.Since(sent)) },
		}))
		resp, err := client.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	require.Eventually(t, func() bool { return traces.SpanCount() >= streams }, 5*time.Second, 20*time.Millisecond)
	stop()
	// No kernel TTFT can be longer than from a request's head write to the
	// return of the server's first event's write: the kernel stamps the
	// request once it reached the server, and the first chunk inside that
	// write. Not the client's wait: on loopback the client can read the
	// event before the server's write returns, and in an emulated guest
	// the kernel's stamp at the write's end came 1.7 ms after the
	// client's.
	written := sse.Written()
	require.Len(t, written, streams)
	require.Len(t, sentNS, streams)
	slices.SortFunc(written, func(a, b teststack.SSEWrite) int { return cmp.Compare(a.StartMono, b.StartMono) })
	var maxTTFT time.Duration
	for i, w := range written {
		require.NotEmpty(t, w.After)
		maxTTFT = max(maxTTFT, time.Duration(w.After[0]-sentNS[i]))
	}
	t.Logf("longest client wait for its first event %v; longest from a request to its first event's write return %v", clientTTFT, maxTTFT)

	// Spans: one per stream, in the caller's trace, with exact counts.
	require.Equal(t, streams, traces.SpanCount())
	for _, td := range traces.AllTraces() {
		rs := td.ResourceSpans()
		for i := range rs.Len() {
			pid, ok := rs.At(i).Resource().Attributes().Get("process.pid")
			require.True(t, ok)
			require.EqualValues(t, os.Getpid(), pid.Int())
			spans := rs.At(i).ScopeSpans().At(0).Spans()
			for j := range spans.Len() {
				sp := spans.At(j)
				require.Equal(t, "POST /v1/chat/completions", sp.Name())
				require.Equal(t, ptrace.SpanKindServer, sp.Kind())
				require.Equal(t, traceID, sp.TraceID().String())
				require.Equal(t, parentID, sp.ParentSpanID().String())
				a := sp.Attributes().AsRaw()
				require.Equal(t, "POST", a["http.request.method"])
				require.Equal(t, "/v1/chat/completions", a["url.path"])
				require.EqualValues(t, 200, a["http.response.status_code"])
				require.EqualValues(t, port, a["server.port"])
				require.Equal(t, "127.0.0.1", a["client.address"])
				require.Equal(t, "llama-3-8b", a["gen_ai.request.model"])
				require.Equal(t, "http", a["tokenwire.stream.mode"])
				require.Equal(t, "terminator", a["tokenwire.stream.end_reason"])
				require.EqualValues(t, 10, a["tokenwire.stream.chunks"], "the [DONE] event ends the stream and is not a chunk")
				// At least the server's think time, at most maxTTFT.
				ttft := a["gen_ai.response.time_to_first_chunk"].(float64)
				require.GreaterOrEqual(t, ttft, think.Seconds())
				require.LessOrEqual(t, ttft, maxTTFT.Seconds())
				require.Equal(t, 1, sp.Events().Len())
				require.Equal(t, "first_chunk", sp.Events().At(0).Name())
				require.Less(t, sp.StartTimestamp().AsTime(), sp.Events().At(0).Timestamp().AsTime())
				require.Less(t, sp.Events().At(0).Timestamp().AsTime(), sp.EndTimestamp().AsTime())
				require.WithinDuration(t, time.Now(), sp.EndTimestamp().AsTime(), 10*time.Second)
			}
		}
	}

	// Metrics: cumulative totals in the last emission.
	md := metrics.AllMetrics()[len(metrics.AllMetrics())-1]
	want := map[string]any{"server.port": int64(port), "http.request.method": "POST", "http.route": "/v1/chat/completions",
		"gen_ai.request.model": "llama-3-8b", "tokenwire.stream.mode": "http"}
	for _, name := range []string{"gen_ai.server.time_to_first_token", "gen_ai.server.request.duration"} {
		count, points := histogramCount(md, name, want)
		require.Equal(t, 1, points, name)
		require.EqualValues(t, streams, count, name)
	}
	count, _ := histogramCount(md, "tokenwire.stream.chunk.interval", want)
	require.EqualValues(t, streams*9, count, "9 intervals between 10 chunks, per stream")
	chunks, _ := sumValue(md, "tokenwire.stream.chunks", want)
	require.EqualValues(t, streams*10, chunks)
	bytesSum, _ := sumValue(md, "tokenwire.stream.bytes", want)
	require.Greater(t, bytesSum, int64(streams*10*40))
	forEachMetric(md, "gen_ai.server.time_to_first_token", func(m pmetric.Metric) {
		dp := m.Histogram().DataPoints().At(0)
		require.GreaterOrEqual(t, dp.Min(), think.Seconds())
		require.LessOrEqual(t, dp.Max(), maxTTFT.Seconds()) // as the spans' (above)
	})
	// The stream metrics sit under the writing process's resource.
	found := false
	for i := range md.ResourceMetrics().Len() {
		if pid, ok := md.ResourceMetrics().At(i).Resource().Attributes().Get("process.pid"); ok && pid.Int() == int64(os.Getpid()) {
			found = true
		}
	}
	require.True(t, found, "no resource with process.pid of the server")
}

// TestBadInputOnAWatchedPort sends what a stream probe must survive: random
// bytes, truncated request lines, a 1 MiB header, a request with no body and
// a plain (not streamed) response. None of it is a stream: no TTFT, no span;
// each is counted as a skipped response.
func TestBadInputOnAWatchedPort(t *testing.T) {
	bpftest.Require(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`) // Content-Length: a plain response
	}), MaxHeaderBytes: 1 << 20}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := start(t, streamConfig(port, 100*time.Millisecond))

	send := func(payload []byte) {
		c, err := net.Dial("tcp4", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		c.Write(payload)
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	}
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(i*7919 + i>>3) // deterministic noise
	}
	send(random)
	send([]byte("POST /v1/chat/compl"))
	send([]byte("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n"))
	send([]byte("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	send([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))

	time.Sleep(300 * time.Millisecond)
	s.shutdown()
	md := lastEmission(s.metrics)
	count, _ := histogramCount(md, "gen_ai.server.time_to_first_token", map[string]any{})
	require.Zero(t, count, "bad input or plain responses produced a TTFT")
	chunks, _ := sumValue(md, "tokenwire.stream.chunks", map[string]any{})
	require.Zero(t, chunks)
}

// TestOpaqueProtocol runs a line-based echo protocol (not HTTP) on a
// watched port: it is reported as an opaque stream, every reply write a
// chunk, with exact bytes.
func TestOpaqueProtocol(t *testing.T) {
	bpftest.Require(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				n, _ := c.Read(buf)
				for i := range 5 { // five replies, 10 ms apart
					fmt.Fprintf(c, "reply %d to %s\n", i, bytes.TrimSpace(buf[:n]))
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	s := start(t, streamConfig(port, 100*time.Millisecond))

	c, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	io.WriteString(c, "\x01\x02ping\n")
	got, _ := io.ReadAll(c)
	c.Close()
	time.Sleep(200 * time.Millisecond)
	s.shutdown()

	md := lastEmission(s.metrics)
	opaque := map[string]any{"server.port": int64(port), "tokenwire.stream.mode": "opaque", "http.request.method": ""}
	count, points := histogramCount(md, "gen_ai.server.time_to_first_token", opaque)
	require.Equal(t, 1, points)
	require.EqualValues(t, 1, count)
	chunks, _ := sumValue(md, "tokenwire.stream.chunks", opaque)
	require.EqualValues(t, 5, chunks)
	b, _ := sumValue(md, "tokenwire.stream.bytes", opaque)
	require.EqualValues(t, len(got), b)
}

// TestOpaqueStreamsEndAtTheirLastWrite: an opaque stream on a kept-alive
// connection ends at the client's next request, or at its close, well
// after the server's last write; its duration and span still end at that
// write (time to last byte), not after the client's think time.
func TestOpaqueStreamsEndAtTheirLastWrite(t *testing.T) {
	bpftest.Require(t)
	const calls, replies, think = 2, 5, 400 * time.Millisecond
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	// The server's own clock (CLOCK_MONOTONIC, as the kernel's), per call:
	// after it read the request, and around its last write.
	type served struct{ read, lastBegin, lastEnd uint64 }
	servedCh := make(chan served, calls)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for range calls {
			if _, err := c.Read(buf); err != nil {
				return
			}
			var s served
			s.read = teststack.MonotonicNow()
			for i := range replies {
				if i > 0 {
					time.Sleep(10 * time.Millisecond)
				}
				if i == replies-1 {
					s.lastBegin = teststack.MonotonicNow()
				}
				fmt.Fprintf(c, "reply %d\n", i)
			}
			s.lastEnd = teststack.MonotonicNow()
			servedCh <- s
		}
		io.Copy(io.Discard, c) // until the client closes
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	s := start(t, streamConfig(port, 100*time.Millisecond))

	c, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	var sent []uint64
	lines := bufio.NewReader(c)
	for range calls {
		sent = append(sent, teststack.MonotonicNow())
		_, err := io.WriteString(c, "\x01\x02ping\n")
		require.NoError(t, err)
		for range replies {
			_, err := lines.ReadString('\n')
			require.NoError(t, err)
		}
		time.Sleep(think) // the first call ends at the next request, the second at the close
	}
	c.Close()
	require.Eventually(t, func() bool { return s.traces.SpanCount() == calls }, 5*time.Second, 20*time.Millisecond)
	s.shutdown()

	var spans []ptrace.Span
	for _, td := range s.traces.AllTraces() {
		rs := td.ResourceSpans()
		for i := range rs.Len() {
			ss := rs.At(i).ScopeSpans().At(0).Spans()
			for j := range ss.Len() {
				spans = append(spans, ss.At(j))
			}
		}
	}
	slices.SortFunc(spans, func(x, y ptrace.Span) int { return cmp.Compare(x.StartTimestamp(), y.StartTimestamp()) })
	require.Len(t, spans, calls)
	var lo, hi float64 // the durations' sum, bounded as each one is
	for i, reason := range []string{"next_request", "client_closed"} {
		sv := <-servedCh
		sp := spans[i]
		a := sp.Attributes().AsRaw()
		require.Equal(t, "opaque", a["tokenwire.stream.mode"])
		require.Equal(t, reason, a["tokenwire.stream.end_reason"])
		require.EqualValues(t, replies, a["tokenwire.stream.chunks"])
		// The kernel stamps the request once it reached the socket (after
		// the client sent it, before the server read it) and the last
		// chunk inside the last write: the duration lies between the
		// server's read and its last write's start, and the client's send
		// and that write's return; the next request or the close came
		// after the client's think time.
		dur := time.Duration(sp.EndTimestamp() - sp.StartTimestamp())
		least, most := time.Duration(sv.lastBegin-sv.read), time.Duration(sv.lastEnd-sent[i])
		t.Logf("call %d: %s, duration %v, want in [%v, %v]", i, reason, dur, least, most)
		require.GreaterOrEqual(t, dur, least)
		require.LessOrEqual(t, dur, most)
		lo, hi = lo+least.Seconds(), hi+most.Seconds()
	}
	md := lastEmission(s.metrics)
	opaque := map[string]any{"server.port": int64(port), "tokenwire.stream.mode": "opaque"}
	var sum float64
	n := 0
	forEachMetric(md, "gen_ai.server.request.duration", func(m pmetric.Metric) {
		dps := m.Histogram().DataPoints()
		for i := range dps.Len() {
			if matches(dps.At(i).Attributes(), opaque) {
				sum += dps.At(i).Sum()
				n += int(dps.At(i).Count())
			}
		}
	})
	require.Equal(t, calls, n)
	require.GreaterOrEqual(t, sum, lo-1e-9)
	require.LessOrEqual(t, sum, hi+1e-9)
}

// TestLongStreamShowsIntervalsBeforeItEnds checks that a stream longer than
// the collection interval reaches the metrics while it is still running.
func TestLongStreamShowsIntervalsBeforeItEnds(t *testing.T) {
	bpftest.Require(t)
	srv := teststack.ServeHTTP(t, sseServer(10*time.Millisecond, 20*time.Millisecond, 60)) // ~1.2 s
	port := srv.Port
	s := start(t, streamConfig(port, 200*time.Millisecond))

	done := make(chan struct{})
	go func() {
		defer close(done)
		teststack.Fetch(nil, "GET", srv.URL+"/", "")
	}()
	// Within the first half of the stream: TTFT and some intervals are out,
	// the duration (known only at the end) is not.
	time.Sleep(600 * time.Millisecond)
	md := lastEmission(s.metrics)
	ttft, _ := histogramCount(md, "gen_ai.server.time_to_first_token", map[string]any{"server.port": int64(port)})
	intervals, _ := histogramCount(md, "tokenwire.stream.chunk.interval", map[string]any{"server.port": int64(port)})
	duration, _ := histogramCount(md, "gen_ai.server.request.duration", map[string]any{"server.port": int64(port)})
	select {
	case <-done:
		t.Fatal("the stream ended before the check: the test proves nothing")
	default:
	}
	require.EqualValues(t, 1, ttft)
	require.Greater(t, intervals, uint64(5))
	require.Zero(t, duration)
	<-done
}

// TestIdleStreamTimesOut: a server that stops writing mid-stream gets its
// stream ended by streams.idle_timeout, with what it had written so far.
func TestIdleStreamTimesOut(t *testing.T) {
	bpftest.Require(t)
	release := make(chan struct{})
	// Two events, then it hangs, as a stuck model would.
	srv := teststack.ServeHTTP(t, &teststack.SSEServer{Interval: 10 * time.Millisecond, Events: 2, Hold: release,
		Event: func(i int) string { return fmt.Sprintf("data: %d\n\n", i) }})
	defer close(release)
	port := srv.Port

	cfg := streamConfig(port, 200*time.Millisecond)
	cfg.Streams.IdleTimeout = time.Second
	f := NewFactory()
	set := receivertest.NewNopSettings(metadata.Type)
	traces := new(consumertest.TracesSink)
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	defer func() { require.NoError(t, tr.Shutdown(context.Background())) }()

	go func() {
		teststack.Fetch(nil, "GET", srv.URL+"/", "")
	}()
	require.Eventually(t, func() bool { return traces.SpanCount() == 1 }, 5*time.Second, 50*time.Millisecond)
	sp := traces.AllTraces()[0].ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	a := sp.Attributes().AsRaw()
	require.Equal(t, "idle_timeout", a["tokenwire.stream.end_reason"])
	require.EqualValues(t, 2, a["tokenwire.stream.chunks"])
	require.Equal(t, "127.0.0.1", a["client.address"], "the address comes from the stream's first PROGRESS record")
	require.EqualValues(t, port, a["server.port"])
	require.Less(t, sp.EndTimestamp().AsTime().Sub(sp.StartTimestamp().AsTime()), 500*time.Millisecond,
		"the stream ends at its last write, not when the timeout fired")
}

// A stream stuck before its first token (the head flushed, then nothing,
// as a model server with a full queue does) ends by streams.idle_timeout
// on its server's port: no PROGRESS came to carry the socket's addresses,
// and the port comes from its request and head records.
func TestStreamStuckBeforeItsFirstTokenKeepsItsPort(t *testing.T) {
	bpftest.Require(t)
	release := make(chan struct{})
	srv := teststack.ServeHTTP(t, &teststack.SSEServer{HeadersFirst: true, Hold: release})
	defer close(release)

	cfg := streamConfig(srv.Port, 200*time.Millisecond)
	cfg.Streams.IdleTimeout = time.Second
	traces := new(consumertest.TracesSink)
	tr, err := NewFactory().CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, traces)
	require.NoError(t, err)
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	defer func() { require.NoError(t, tr.Shutdown(context.Background())) }()

	go teststack.Fetch(nil, "GET", srv.URL+"/", "")
	require.Eventually(t, func() bool { return traces.SpanCount() == 1 }, 5*time.Second, 50*time.Millisecond)
	a := traces.AllTraces()[0].ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().AsRaw()
	require.Equal(t, "idle_timeout", a["tokenwire.stream.end_reason"])
	require.EqualValues(t, 0, a["tokenwire.stream.chunks"])
	require.EqualValues(t, srv.Port, a["server.port"])
}

// A client that gives up once the head is out and before the first token
// (a request timeout), on a server that then closes: the stream's END is
// written at the close, when the socket has given its port back. The
// stream keeps its server's port, on its span and on its metrics.
func TestClientGoneBeforeItsFirstTokenKeepsItsPort(t *testing.T) {
	bpftest.Require(t)
	addr, port, served := teststack.ServeConn(t, func(c *net.TCPConn) error {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return err
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return err
		}
		return teststack.AwaitPeerClose(c, 10*time.Second) // then it closes, writing nothing more
	})
	s := start(t, streamConfig(int(port), 200*time.Millisecond))

	conn, err := net.Dial("tcp4", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	conn.Close()
	require.NoError(t, <-served)

	require.Eventually(t, func() bool { return s.traces.SpanCount() == 1 }, 5*time.Second, 50*time.Millisecond)
	a := s.traces.AllTraces()[0].ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().AsRaw()
	require.Equal(t, "client_closed", a["tokenwire.stream.end_reason"])
	require.EqualValues(t, 0, a["tokenwire.stream.chunks"])
	require.EqualValues(t, port, a["server.port"])
	require.Eventually(t, func() bool {
		n, _ := histogramCount(lastEmission(s.metrics), "gen_ai.server.request.duration", map[string]any{"server.port": int64(port)})
		return n == 1
	}, 5*time.Second, 50*time.Millisecond, "the stream's duration on its server's port")
}
