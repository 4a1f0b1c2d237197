package stream

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/teststack/llmwire"
)

// TestClientCallIsMeasured: curl (another process) calls a server on a
// configured remote port: one call, its request captured from curl's
// write, every event curl read a chunk, the [DONE] and terminator its end;
// a call to a port not configured yields nothing, nor does the server's
// side of the call (its port is not watched). curl is selected by name:
// before Linux 5.17 its comm keeps the tail of this binary's longer name
// past its NUL (TestCommMatchIgnoresTheOldNamesTail), which the kernel
// matrix's 5.10 guest runs into.
func TestClientCallIsMeasured(t *testing.T) {
	bpftest.Require(t)
	teststack.RequireTool(t, "curl")
	const events = 8
	// A client's chunk is a read: events closer together than curl may be
	// descheduled on a loaded machine are read two at a time.
	srv := &teststack.SSEServer{Think: 60 * time.Millisecond, Interval: 50 * time.Millisecond, Events: events,
		Done: teststack.DoneWithEnd}
	addr, port := serve(t, srv)
	other, _ := serve(t, &teststack.SSEServer{Interval: time.Millisecond, Events: 3, Done: teststack.DoneWithEnd})
	cfg := testConfig(1) // no server on port 1: only the client side is measured
	cfg.Clients = ClientConfig{RemotePorts: []uint16{port}, Names: []string{"curl"}}
	tr, rec := traceWith(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := teststack.Curl(ctx, "http://"+other+"/v1/chat/completions", `{"model":"m"}`); err != nil {
		t.Fatal(err)
	}
	res, err := teststack.Curl(ctx, "http://"+addr+"/v1/chat/completions", `{"model":"m"}`,
		"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil {
		t.Fatal(err)
	}
	streams := rec.ends(t, 1)
	if len(streams) != 1 {
		c, err := tr.Counters()
		t.Fatalf("%d streams, want 1 (the call to the configured port): %v; counters %+v %v", len(streams), streams, c, err)
	}
	for _, rs := range streams {
		var sawReq bool
		for _, r := range rs {
			switch r.Kind {
			case KindRequest:
				sawReq = true
				if !r.Client || string(r.Data[:4]) != "POST" || r.Port != port {
					t.Errorf("request record: client %v, port %d (want %d), data %q", r.Client, r.Port, port, r.Data)
				}
			case KindEnd:
				st := r.Stats
				// The server writes its head with the first event: curl reads
				// them together, and the kernel counts the reads after it:
				// one per event, unless curl read some at once.
				lo, hi := teststack.ChunkRange(t, "curl", res.EventNS, srv.Interval)
				if hi != events {
					t.Errorf("curl got %d events, want %d", hi, events)
				}
				if !st.Client() || r.Reason != EndTerminator || st.Chunks < uint32(lo-1) || st.Chunks > uint32(hi-1) || st.HeadBytes == 0 {
					t.Errorf("END: client %v, reason %v, chunks %d, head bytes %d; want client, terminator, %d to %d after a head with body",
						st.Client(), r.Reason, st.Chunks, st.HeadBytes, lo-1, hi-1)
				}
				if st.Remote.Port() != port {
					t.Errorf("END: remote %v, want port %d", st.Remote, port)
				}
				ttft := time.Duration(st.HeadersTS - st.RequestTS)
				if ttft < srv.Think || ttft > res.TTFB {
					t.Errorf("time to first chunk %v: want at least the server's think time %v, at most curl's %v", ttft, srv.Think, res.TTFB)
				}
				t.Logf("client call: ttft %v (curl's time_starttransfer %v), chunks %d, duration %v",
					ttft, res.TTFB, st.Chunks+1, time.Duration(st.EndTS-st.RequestTS))
			}
		}
		if !sawReq {
			t.Error("no request record")
		}
	}
}

// TOKENWIRE_COST_CLIENTS=1 measures the server path with client tracking
// configured for a port the test does not call: what every other socket
// pays for it.
func init() {
	if os.Getenv("TOKENWIRE_COST_CLIENTS") != "" {
		costConfig = func(c *Config) { c.Clients = ClientConfig{RemotePorts: []uint16{1}} }
	}
}

// TestGoClientCallInKernel: a Go net/http client in this process (no
// other tool: it runs in the kernel guests too) calls a server on a client
// remote port, selected by pid: one call per request on the keep-alive
// connection, each with its request captured, every read of an event a
// chunk (the first with the head: every event unless the client read some
// at once), ended by the terminator.
func TestGoClientCallInKernel(t *testing.T) {
	bpftest.Require(t)
	const events, calls = 5, 2
	// A client's chunk is a read: events 10 ms apart were read two at a
	// time in emulated guests on a loaded machine, so they are further
	// apart here.
	srv := &teststack.SSEServer{Think: 30 * time.Millisecond, Interval: 50 * time.Millisecond, Events: events,
		Done: teststack.DoneWithEnd}
	addr, port := serve(t, srv)
	cfg := testConfig(1)
	cfg.Clients = ClientConfig{RemotePorts: []uint16{port}, Pids: []uint32{uint32(os.Getpid())}}
	tr, rec := traceWith(t, cfg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	var arrivals [][]uint64 // each call's events, when they reached the client
	for range calls {
		eventNS, err := teststack.FetchEvents(client, "POST", "http://"+addr+"/v1/chat/completions", `{"model":"m"}`)
		if err != nil {
			t.Fatal(err)
		}
		arrivals = append(arrivals, eventNS)
	}
	streams := rec.ends(t, calls)
	// The server's answers, in the order the calls were made.
	written := srv.Written()
	if len(written) != calls {
		t.Fatalf("the server answered %d requests, want %d", len(written), calls)
	}
	slices.SortFunc(written, func(a, b teststack.SSEWrite) int { return cmp.Compare(a.StartMono, b.StartMono) })
	var ends []Record
	var uncaptured uint64
	for _, rs := range streams {
		var reqs int
		for _, r := range rs {
			switch r.Kind {
			case KindRequest:
				reqs++
			case KindEnd:
				ends = append(ends, r)
			}
		}
		if reqs == 0 {
			uncaptured++
		}
	}
	// A request may go uncaptured only because a page of its buffer was
	// not mapped when the probe read it (the Go heap's pages can be
	// migrated or collapsed into huge pages at any time), and the kernel
	// counts each such read (TestUnreadRequestIsCounted; a response head
	// it could not read counts too).
	if c, err := tr.Counters(); err != nil || c.Unread < uncaptured {
		t.Errorf("%d calls with no request captured, %d unread payloads counted (%v): records %v",
			uncaptured, c.Unread, err, streams)
	} else if uncaptured > 0 {
		t.Logf("%d calls' requests could not be read (counted unread)", uncaptured)
	}
	if len(ends) != calls {
		t.Fatalf("%d calls ended, want %d", len(ends), calls)
	}
	slices.SortFunc(ends, func(a, b Record) int { return cmp.Compare(a.Stats.RequestTS, b.Stats.RequestTS) })
	for i, r := range ends {
		st := r.Stats
		lo, hi := teststack.ChunkRange(t, fmt.Sprintf("call %d", i), arrivals[i], srv.Interval)
		if hi != events {
			t.Errorf("call %d: the client got %d events, want %d", i, hi, events)
		}
		if !st.Client() || r.Reason != EndTerminator || st.Chunks < uint32(lo-1) || st.Chunks > uint32(hi-1) || st.HeadBytes == 0 ||
			st.Remote.Port() != port || (st.Chunks > 0 && st.FirstChunkTS <= st.HeadersTS) {
			t.Errorf("call %d END: client %v, reason %v, chunks %d after a head of %d bytes (want %d to %d), remote %v",
				i, st.Client(), r.Reason, st.Chunks, st.HeadBytes, lo-1, hi-1, st.Remote)
		}
		// The first chunk is the server's first event: read after the
		// server began to write it (CLOCK_MONOTONIC, the kernel's clock).
		// Not against the server's think time: the request's time is when
		// its write returned, which on loopback is after the server read
		// it, and a client descheduled in between (an emulated guest on a
		// loaded machine) starts the call later than the think began.
		if w := written[i]; len(w.Before) == 0 || st.HeadersTS < w.Before[0] {
			t.Errorf("call %d: first chunk read at %d (request at %d), before the server began its first event's write at %v",
				i, st.HeadersTS, st.RequestTS, w.Before)
		}
	}
}

// TestUnreadRequestIsCounted: a client writes its request from a page
// that another thread unmaps (MADV_DONTNEED) over and over, so that the
// page is often gone between the write's copy and the probe's read of the
// same bytes, which BPF cannot fault back in. Every write is either
// captured (the request's bytes, or the zeros of a page unmapped before
// the copy) or counted unread; both happen within the bound.
func TestUnreadRequestIsCounted(t *testing.T) {
	bpftest.Require(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	cfg := testConfig(1)
	cfg.RequestCaptureBytes = 64 << 10
	cfg.Clients = ClientConfig{RemotePorts: []uint16{port}, Pids: []uint32{uint32(os.Getpid())}}
	tr, rec := traceWith(t, cfg)

	const size, writes = 16, 4096 // within the capture budget: every write is captured or counted
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	conn, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	req := []byte("POST /v1/chat/co")[:size]
	write := func() {
		copy(page, req)
		var werr error
		if err := raw.Write(func(fd uintptr) bool {
			var n int
			n, werr = unix.Write(int(fd), page[:size])
			if werr == nil && n != size {
				werr = fmt.Errorf("wrote %d of %d bytes", n, size)
			}
			return werr != unix.EAGAIN
		}); err != nil || werr != nil {
			t.Fatal(err, werr)
		}
	}
	write() // the call starts with the page in place
	stop, stopped := make(chan struct{}), make(chan struct{})
	var zaps atomic.Uint64
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	}
	defer halt() // before the page is unmapped, when a write fails
	go func() {
		defer close(stopped)
		runtime.LockOSThread()
		for {
			select {
			case <-stop:
				return
			default:
				if err := unix.Madvise(page, unix.MADV_DONTNEED); err != nil {
					t.Error(err)
					return
				}
				zaps.Add(1)
			}
		}
	}()
	// Each write waits for a zap after the last one, so that the two
	// threads interleave even when the scheduler would run one alone.
	// Until a few writes were unread (1 in 500 to 1 in 10 here), at most as
	// many as the capture budget holds.
	n := 1
	deadline := time.Now().Add(10 * time.Second)
	for ; n < writes; n++ {
		if n%50 == 0 {
			if c, err := tr.Counters(); err != nil || c.Unread >= 3 {
				break
			}
		}
		for z := zaps.Load(); zaps.Load() == z && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		write()
	}
	halt()

	var captured, zeros int
	var c Counters
	deadline = time.Now().Add(5 * time.Second)
	for {
		captured, zeros = 0, 0
		rec.mu.Lock()
		for _, r := range rec.recs {
			if r.Kind != KindRequest {
				continue
			}
			captured++
			if !bytes.Equal(r.Data, req) {
				zeros++
			}
			// A page unmapped during the copy into it leaves zeros in
			// place of what was written before.
			ok := len(r.Data) == size
			for i := 0; ok && i < size; i++ {
				ok = r.Data[i] == 0 || r.Data[i] == req[i]
			}
			if !ok {
				t.Errorf("captured %q, want the request with zeros in places", r.Data)
			}
		}
		rec.mu.Unlock()
		if c, err = tr.Counters(); err != nil {
			t.Fatal(err)
		}
		if captured+int(c.Unread) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d writes: %d captured (%d of them with zeros), %d counted unread", n, captured, zeros, c.Unread)
	if captured+int(c.Unread) != n || c.RecordsLost != 0 {
		t.Errorf("%d captured + %d unread, want %d writes (records lost: %d)", captured, c.Unread, n, c.RecordsLost)
	}
	if captured == 0 || c.Unread == 0 {
		t.Errorf("the page was unmapped between copy and read in %d of %d writes: want some of each", c.Unread, n)
	}
}

// TestCommMatchIgnoresTheOldNamesTail: a comm is matched by its name and
// the NUL after it, whatever follows (before Linux 5.17, the tail of the
// name the process had before exec), and a longer name or one cut to
// MaxCommLen is not taken for a shorter one. It checks the words and
// masks user space sets, compared as bpf/stream_client.h compares them;
// the BPF compare itself meets such a tail only on the kernel matrix's
// 5.10 guest (TestClientCallIsMeasured).
func TestCommMatchIgnoresTheOldNamesTail(t *testing.T) {
	kernelComm := func(s string) [2]uint64 { // 16 bytes as the kernel holds them
		var b [16]byte
		copy(b[:], s)
		var w [2]uint64
		for i := range 16 {
			w[i/8] |= uint64(b[i]) << (8 * (i % 8))
		}
		return w
	}
	matches := func(name, comm string) bool {
		w, m, c := commWords(name), commMask(name), kernelComm(comm)
		return w[0] == c[0]&m[0] && w[1] == c[1]&m[1]
	}
	for _, tc := range []struct {
		name, comm string
		want       bool
	}{
		{"curl", "curl", true},
		{"curl", "curl\x00m.test", true},              // exec'ed by stream.test on 5.10
		{"curl", "curl\x00\x00\x00\x00\x00xyz", true}, // the old tail past a second NUL
		{"curl", "curly", false},
		{"curl", "cur", false},
		{"python3", "python3.11", false},
		{"a-very-long-process-name", "a-very-long-pro", true}, // cut to MaxCommLen
		{"a-very-long-pro", "a-very-long-pro", true},
		{"a-very-long-pr", "a-very-long-pro", false},
	} {
		if got := matches(tc.name, tc.comm); got != tc.want {
			t.Errorf("name %q, comm %q: match %v, want %v", tc.name, tc.comm, got, tc.want)
		}
	}
}

// TestClientReadOfTheLastEvents: a client (this process, by pid) reads a
// server's usage chunk, [DONE] and the chunked terminator, written in one
// write, in one read: the read's end goes to user space with the usage
// chunk in it, as a server's write of them does
// (TestUsageGatheredWithTheEnd).
func TestClientReadOfTheLastEvents(t *testing.T) {
	bpftest.Require(t)
	last := llmwire.Chunked(llmwire.VLLMChatUsage) + llmwire.Chunked(llmwire.SSEDone) + llmwire.LastChunk
	port := writesServer(t, [][][]byte{frame("data: 0\n\n"), {[]byte(last)}})
	cfg := testConfig(1)
	cfg.Clients = ClientConfig{RemotePorts: []uint16{port}, Pids: []uint32{uint32(os.Getpid())}}
	_, rec := traceWith(t, cfg)
	getEvents(t, port)
	streams := rec.ends(t, 1)
	e := requireCompleted(t, streams, 1)[0]
	if !e.Stats.Client() || e.Reason != EndTerminator {
		t.Errorf("END: client %v, reason %v; want a client's, ended by the terminator", e.Stats.Client(), e.Reason)
	}
	var tails []string
	for _, r := range streams[e.ID] {
		if r.Kind == KindBody && r.Flags&BodyTail != 0 {
			tails = append(tails, string(r.Data))
		}
	}
	// The read's end: the last write, and the one before it when the
	// client read them together.
	if len(tails) != 1 || !strings.HasSuffix(tails[0], last) {
		t.Errorf("tails %q; want one, ending with the last write's %d bytes", tails, len(last))
	}
}
