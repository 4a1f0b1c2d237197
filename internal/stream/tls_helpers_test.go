package stream

import (
	"bytes"
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/tlsprobe"
)

// traceTLS opens a tracer on ports that reads TLS as plaintext through
// uprobes (uprobes set) or times it from record headers, and records what
// it reads until the test ends.
func traceTLS(t *testing.T, uprobes bool, ports ...uint16) (*Tracer, *recorder) {
	t.Helper()
	return traceTLSWith(t, tlsTestConfig(t, uprobes, ports...))
}

// tlsTestConfig is the tests' configuration with TLS read through uprobes
// or not, scanning for servers every 200 ms.
func tlsTestConfig(t *testing.T, uprobes bool, ports ...uint16) Config {
	cfg := testConfig(ports...)
	cfg.TLS = TLSConfig{Enabled: uprobes, ScanInterval: 200 * time.Millisecond, Report: func(tg tlsprobe.Target) {
		t.Logf("TLS target: %+v", tg)
	}}
	return cfg
}

func traceTLSWith(t *testing.T, cfg Config) (*Tracer, *recorder) {
	t.Helper()
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.TLSError(); err != nil {
		t.Fatal(err)
	}
	return tr, record(t, tr)
}

// waitProbed waits until pid's TLS library is probed. The first probe of
// a tracer loads the uprobe programs through the verifier: seconds of CPU
// when the kernel matrix's guests share the machine's two CPUs.
func waitProbed(t *testing.T, tr *Tracer, pid int) tlsprobe.Target {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, tg := range tr.TLSTargets() {
			if int(tg.PID) == pid && tg.Probed {
				return tg
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not probed; targets %+v, TLS error %v; what the scan would see: %s",
				pid, tr.TLSTargets(), tr.TLSError(), teststack.TLSScanView(pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endsOf waits for n ENDs and returns every stream's records, and the END
// records sorted by request time. It fails the test unless there are
// exactly n streams, each with a response.
func endsOf(t *testing.T, rec *recorder, n int) (map[ID][]Record, []Record) {
	t.Helper()
	streams := rec.ends(t, n)
	ends := requireCompleted(t, streams, n)
	if len(streams) != n {
		for id, rs := range streams {
			t.Logf("stream %v: %d records, first %v", id, len(rs), rs[0].Kind)
		}
		t.Fatalf("%d streams, want %d", len(streams), n)
	}
	slices.SortFunc(ends, func(a, b Record) int { return cmp.Compare(a.Stats.RequestTS, b.Stats.RequestTS) })
	return streams, ends
}

// headOf returns the stream's response head record and how long its
// headers are.
func headOf(t *testing.T, recs []Record) (Record, int) {
	t.Helper()
	for _, r := range recs {
		if r.Kind == KindResponse {
			return r, bytes.Index(r.Data, []byte("\r\n\r\n")) + 4
		}
	}
	t.Fatalf("no response head among %d records", len(recs))
	return Record{}, 0
}

// firstBody returns what the stream's first-body record carries (nil:
// none) and how many such records it has.
func firstBody(recs []Record) (data []byte, n int) {
	for _, r := range recs {
		if r.Kind == KindBody && r.Flags&BodyFirst != 0 {
			if n == 0 {
				data = r.Data
			}
			n++
		}
	}
	return data, n
}

// checkPlainStream checks a plaintext stream, or a TLS one read as
// plaintext (tls), against what the Python or Node server reported
// writing and when the client sent the request: the same counts, heads
// and bytes, the first event in user space, and kernel stamps inside the CLOCK_MONOTONIC brackets of what
// they stand for.
func checkPlainStream(t *testing.T, recs []Record, end Record, rep teststack.Report, sent uint64, tls bool) {
	t.Helper()
	s := end.Stats
	if s.TLS() != tls {
		t.Errorf("stream %v: flags %#x, want TLS %v", end.ID, s.Flags, tls)
	}
	if end.Reason != EndTerminator {
		t.Errorf("stream %v: end %v, want terminator", end.ID, end.Reason)
	}
	// POST /v1/chat/completions, a query allowed.
	req := requestBytes(recs)
	line, _, _ := bytes.Cut(req, []byte("\r\n"))
	target, post := bytes.CutPrefix(line, []byte("POST "))
	target, http11 := bytes.CutSuffix(target, []byte(" HTTP/1.1"))
	path, _, _ := bytes.Cut(target, []byte("?"))
	if !post || !http11 || string(path) != "/v1/chat/completions" ||
		!bytes.Contains(req, []byte(`"model":`)) || !bytes.HasSuffix(req, []byte("true}")) {
		t.Errorf("stream %v: request captured %q", end.ID, req)
	}
	for _, r := range recs {
		if (r.Kind == KindRequest || r.Kind == KindResponse || r.Kind == KindBody) && r.Port != end.Stats.Local.Port() {
			t.Errorf("stream %v: %v record on port %d, want the server's %d", end.ID, r.Kind, r.Port, end.Stats.Local.Port())
		}
	}
	head, headerLen := headOf(t, recs)
	if head.Flags&RespHTTP == 0 || head.Flags&RespChunked == 0 {
		t.Errorf("stream %v: head flags %#x: %q", end.ID, head.Flags, head.Data)
	}
	headBody := s.HeadBody(headerLen)
	// The first event (a response's model and id) reaches user space
	// once: with the head or as the first body bytes.
	body, n := firstBody(recs)
	if ev := []byte(teststack.OpenAIEvent(0)); n > 1 || bytes.Contains(head.Data[headerLen:], ev) == bytes.Contains(body, ev) {
		t.Errorf("stream %v: the first event not once with the head %q or as the first body bytes %q (%d records)",
			end.ID, head.Data[headerLen:], body, n)
	}
	chunks, first := s.Chunks, s.FirstChunkTS
	if headBody > 0 { // the first event went out with the head
		chunks, first = chunks+1, s.HeadersTS
	}
	if int(chunks) != rep.Events {
		t.Errorf("stream %v: %d chunks, the server wrote %d events", end.ID, chunks, rep.Events)
	}
	// Plaintext bytes, chunked framing included; the terminator after a
	// [DONE] write of its own ends the stream before it is counted.
	framed := uint64(rep.Events*teststack.ChunkedSize(len(teststack.OpenAIEvent(0))) + teststack.ChunkedSize(len(teststack.DoneEvent)))
	if got := s.Bytes + uint64(headBody); got != framed && got != framed+5 {
		t.Errorf("stream %v: %d body bytes, want the plaintext's %d (or %d with the terminator)", end.ID, got, framed, framed+5)
	}
	if s.RequestTS < sent || s.RequestTS > rep.StartNS {
		t.Errorf("stream %v: request stamped at %d, outside [client sent %d, handler started %d]", end.ID, s.RequestTS, sent, rep.StartNS)
	}
	if len(rep.EventNS) < 2 || first < rep.EventNS[0] || first > rep.EventNS[1] {
		t.Errorf("stream %v: first chunk stamped at %d, outside [event 0 handed over, event 1 handed over] %v", end.ID, first, rep.EventNS)
	}
	t.Logf("stream %v: TTFT %v (server's think %v), %d chunks, %d bytes", end.ID, time.Duration(first-s.RequestTS),
		time.Duration(rep.EventNS[0]-rep.StartNS), chunks, s.Bytes+uint64(headBody))
}

// checkOpaqueStream checks a TLS stream timed from its record headers: one
// stream per request, every application-data write burst a chunk (wantChunks),
// the first of them at the response's first write, which the server makes
// between firstAfter and firstBefore.
func checkOpaqueStream(t *testing.T, end Record, rep teststack.Report, sent uint64, wantChunks int, firstAfter, firstBefore uint64) {
	t.Helper()
	s := end.Stats
	if s.Flags != StatsTLSOpaque {
		t.Errorf("stream %v: flags %#x, want TLS opaque", end.ID, s.Flags)
	}
	if int(s.Chunks) != wantChunks {
		t.Errorf("stream %v: %d chunks, want %d (%d events)", end.ID, s.Chunks, wantChunks, rep.Events)
	}
	if s.RequestTS < sent || s.RequestTS > rep.StartNS {
		t.Errorf("stream %v: request stamped at %d, outside [client sent %d, handler started %d]", end.ID, s.RequestTS, sent, rep.StartNS)
	}
	if s.FirstChunkTS < firstAfter || s.FirstChunkTS > firstBefore {
		t.Errorf("stream %v: first chunk stamped at %d, outside [%d, %d]", end.ID, s.FirstChunkTS, firstAfter, firstBefore)
	}
	// Ciphertext: more than the plaintext's bytes.
	if plain := uint64(rep.BodyBytes); s.Bytes <= plain {
		t.Errorf("stream %v: %d bytes, not more than the plaintext's %d", end.ID, s.Bytes, plain)
	}
	t.Logf("stream %v: time to first write %v, %d chunks, %d bytes, end %v", end.ID,
		time.Duration(s.FirstChunkTS-s.RequestTS), s.Chunks, s.Bytes, end.Reason)
}
