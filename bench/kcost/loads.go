package main

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// openAIChunk is a chat completion chunk as vLLM and OpenAI stream them
// (id, created, model, finish_reason): about 180 bytes.
func openAIChunk(i int) string {
	return fmt.Sprintf(`data: {"id":"chatcmpl-7f3a9c21","object":"chat.completion.chunk","created":1764500000,"model":"llama-3.1-8b-instruct","choices":[{"index":0,"delta":{"content":"tok%03d"},"finish_reason":null}]}`+"\n\n", i%1000)
}

// load is a server and the clients that stream from it.
type load struct {
	name, describe string
	port           int
	// serverPid is the server's process when it is not this one: its CPU
	// time over each load is measured (uprobes cost it trap time that bpf
	// stats do not count).
	serverPid int
	modes     []string // the collector set-ups measured under this load
	// withBase: mode base (-base-collector) runs beside mode tokenwire.
	withBase bool
	run      func(d time.Duration) (loadResult, error)
	stop     func()
}

// roundModes is l's modes in round r's order: rotated by r, so that no
// mode is always first, with mode base next to mode tokenwire, after it
// in even rounds and before it in odd ones, so that the pair the report
// compares meets the same minute of the host's drift.
func (l *load) roundModes(r int) []string {
	var out []string
	for m := range l.modes {
		mode := l.modes[(m+r)%len(l.modes)]
		switch {
		case mode != "tokenwire" || !l.withBase:
			out = append(out, mode)
		case r%2 == 0:
			out = append(out, mode, "base")
		default:
			out = append(out, "base", mode)
		}
	}
	return out
}

type loadResult struct {
	chunks, streams int
	bytes           int64 // event bytes received (chunked framing removed)
	err             error // the first client error, if any
}

// tally collects what the client loops saw.
type tally struct {
	mu sync.Mutex
	loadResult
}

func (t *tally) add(events int, bytes int64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.chunks += events
	t.bytes += bytes
	if err != nil && t.err == nil {
		t.err = err
	}
	if err == nil {
		t.streams++
	}
}

// loops runs n client loops until d has passed; each finishes the stream
// it is in.
func loops(n int, d time.Duration, one func(i int, t *tally)) loadResult {
	var t tally
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				one(i, &t)
			}
		}()
	}
	wg.Wait()
	return t.loadResult
}

func startLoads(tmp string) ([]*load, error) {
	var out []*load
	for _, name := range strings.Split(*loadsFlag, ",") {
		var l *load
		var err error
		switch name {
		case "dense":
			l, err = denseLoad()
		case "sparse":
			l, err = sparseLoad(tmp, nil)
		case "tls":
			var cert *teststack.TLSCert
			if cert, err = teststack.NewTLSCert(tmp); err == nil {
				l, err = sparseLoad(tmp, cert)
			}
		case "gotls":
			l, err = goTLSLoad(tmp)
		default:
			err = fmt.Errorf("-loads: unknown load %q", name)
		}
		if err != nil {
			for _, l := range out {
				l.stop()
			}
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// denseLoad is the Go SSE server with one connection per stream.
func denseLoad() (*load, error) {
	srv := &teststack.SSEServer{Think: 10 * time.Millisecond, Interval: *denseInterval, Events: *denseChunks,
		HeadersFirst: true, Done: teststack.DoneFlushed, Event: openAIChunk}
	hs, err := teststack.StartHTTP("", srv)
	if err != nil {
		return nil, err
	}
	l := &load{name: "dense", port: hs.Port, stop: func() { hs.Close() }, modes: denseSparseModes, withBase: *baseCollector != "",
		describe: fmt.Sprintf("Go net/http SSE server, %d concurrent streams of %d events %v apart, %d-byte events, one connection per stream",
			*denseStreams, *denseChunks, *denseInterval, len(openAIChunk(0)))}
	l.run = func(d time.Duration) (loadResult, error) {
		r := loops(*denseStreams, d, func(i int, t *tally) {
			n, b, err := getStream(hs.Addr)
			t.add(n, b, err)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
			}
		})
		return r, nil
	}
	return l, nil
}

// getStream reads one stream over a new connection and counts its data
// events ([DONE] is not a chunk) and their bytes.
func getStream(addr string) (int, int64, error) {
	conn, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(time.Duration(*denseChunks)*(*denseInterval)*10 + 30*time.Second))
	fmt.Fprintf(conn, "GET /stream HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n")
	br := bufio.NewReaderSize(conn, 8192)
	n, b := 0, int64(0)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if n < *denseChunks {
				return n, b, fmt.Errorf("stream ended after %d of %d events: %v", n, *denseChunks, err)
			}
			return n, b, nil
		}
		if len(line) > 6 && string(line[:6]) == "data: " && string(line) != "data: [DONE]\n" {
			n++
			b += int64(len(line)) + 1 // the blank line after it
		}
	}
}

// denseSparseModes are the modes of the dense and sparse loads: the
// collector as configured, without response details and without the
// state slots, then the write program's steps (the floor first); and mode
// base with -base-collector (load.roundModes).
var denseSparseModes = append([]string{"tokenwire", "nodetails", "noslots"}, writeStepModes()...)

func writeStepModes() []string {
	var m []string
	for _, st := range benchutil.WriteSteps {
		m = append(m, st.Mode)
	}
	return m
}

// sparseLoad is uvicorn + starlette (teststack's Python server) and
// clients that send chat completions as openai-python does; over TLS
// (Python's ssl module, libssl) when cert is set.
func sparseLoad(tmp string, cert *teststack.TLSCert) (*load, error) {
	srv, err := teststack.StartStack(teststack.StackStarlette, teststack.StackOptions{
		Events: *sparseChunks, Think: 20 * time.Millisecond, Interval: *sparseIntv, Dir: tmp, TLS: cert})
	if err != nil {
		return nil, err
	}
	l := &load{name: "sparse", port: srv.Port, serverPid: srv.Proc.Pid(), stop: func() { srv.Stop() },
		modes: denseSparseModes, withBase: *baseCollector != "",
		describe: fmt.Sprintf("uvicorn %v + starlette (Python %v), %d openai-python-style clients on keep-alive connections, streams of %d events %v apart",
			srv.Ready["uvicorn"], srv.Ready["python"], *sparseStreams, *sparseChunks, *sparseIntv)}
	var clientTLS *tls.Config
	if cert != nil {
		clientTLS = cert.ClientConfig()
		l.name, l.modes, l.withBase = "tls", []string{"tokenwire", "notls", "bystander", "floor"}, false
		l.describe = "the sparse load over TLS (uvicorn's --ssl-certfile, Python's ssl module on libssl; TLS 1.3 clients): " + l.describe
	}
	l.run = func(d time.Duration) (loadResult, error) {
		clients := make([]*teststack.SDKClient, *sparseStreams)
		for i := range clients {
			clients[i] = &teststack.SDKClient{SDK: teststack.SDKPython, Addr: srv.Addr, Timeout: time.Minute, TLS: clientTLS}
		}
		defer func() {
			for _, c := range clients {
				c.Close()
			}
		}()
		r := loops(*sparseStreams, d, func(i int, t *tally) {
			res, err := clients[i].Chat(teststack.ChatRequest{Model: "llama-3.1-8b-instruct", Stream: true})
			if err == nil && !res.Done {
				err = fmt.Errorf("stream without [DONE] after %d events", res.Events)
			}
			t.add(res.Events, int64(len(res.Body)-len(teststack.DoneEvent)), err)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
			}
		})
		return r, nil
	}
	return l, nil
}
