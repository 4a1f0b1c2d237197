package httpsniff

import (
	"fmt"
	"strings"
	"testing"
)

const goodTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// scanTP feeds req to a TraceParentScanner in slices of n bytes.
func scanTP(req string, n int) TraceParent {
	var s TraceParentScanner
	for off := 0; off < len(req); off += n {
		s.WriteAt(int64(off), []byte(req[off:min(off+n, len(req))]))
	}
	return s.TraceParent()
}

func TestTraceParentScanner(t *testing.T) {
	pad := ""
	for i := range 200 { // 8 KiB of headers before it, as proxies and SDKs add
		pad += fmt.Sprintf("X-Pad-%03d: %s\r\n", i, strings.Repeat("p", 28))
	}
	tests := []struct {
		name    string
		in      string
		traceID string // "" for none
	}{
		{"among headers", "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nTraceparent: " + goodTP + "\r\nContent-Type: application/json\r\n\r\n{}", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"after 8 KiB of headers", "POST /v1/chat/completions HTTP/1.1\r\n" + pad + "traceparent: " + goodTP + "\r\n\r\n", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"last header, bare LF", "GET / HTTP/1.1\nHost: a\ntraceparent:" + goodTP + "\n\n", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"white space before the colon and around the value", "GET / HTTP/1.1\r\nTRACEPARENT \t:  " + goodTP + " \t\r\n\r\n", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"in the body, not a header", "POST / HTTP/1.1\r\nHost: a\r\n\r\ntraceparent: " + goodTP + "\r\n", ""},
		{"in another header's value", "GET / HTTP/1.1\r\nX-Note: traceparent: " + goodTP + "\r\n\r\n", ""},
		{"a longer name", "GET / HTTP/1.1\r\ntraceparents: " + goodTP + "\r\n\r\n", ""},
		{"a folded line", "GET / HTTP/1.1\r\nX-A: b\r\n traceparent: " + goodTP + "\r\n\r\n", ""},
		{"the request line", "GET /traceparent:" + goodTP + " HTTP/1.1\r\n\r\n", ""},
		{"a later invalid one replaces it", "GET / HTTP/1.1\r\ntraceparent: " + goodTP + "\r\ntraceparent: 00-zz\r\n\r\n", ""},
		{"a later valid one replaces it", "GET / HTTP/1.1\r\ntraceparent: 00-00000000000000000000000000000001-00f067aa0ba902b7-01\r\ntraceparent: " + goodTP + "\r\n\r\n", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"value cut by the end of the bytes", "GET / HTTP/1.1\r\ntraceparent: " + goodTP[:40], ""},
		{"a 200-byte value", "GET / HTTP/1.1\r\ntraceparent: " + goodTP + strings.Repeat("-x", 100) + "\r\n\r\n", ""},
		{"trailing white space beyond the kept bytes", "GET / HTTP/1.1\r\ntraceparent: " + goodTP + strings.Repeat(" ", 40) + "\r\n\r\n", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"TLS client hello", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Whole, and split at every size: the result must not change.
			for n := 1; n <= len(tt.in); n++ {
				tp := scanTP(tt.in, n)
				got := ""
				if tp.Valid {
					got = hexs(tp.TraceID[:])
				}
				if got != tt.traceID {
					t.Fatalf("in slices of %d: trace id %q, want %q", n, got, tt.traceID)
				}
			}
		})
	}
}

// A lost slice stops the scan: what came before it stands, nothing after
// it is read (it could be the body, or the middle of another header).
func TestTraceParentScannerGap(t *testing.T) {
	req := "GET / HTTP/1.1\r\ntraceparent: " + goodTP + "\r\nX-A: b\r\n"
	var s TraceParentScanner
	s.WriteAt(0, []byte(req))
	s.WriteAt(int64(len(req))+10, []byte("traceparent: 00-00000000000000000000000000000001-00f067aa0ba902b7-01\r\n\r\n"))
	if tp := s.TraceParent(); !tp.Valid || hexs(tp.TraceID[:]) != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("after a gap: %+v", tp)
	}
	// Slices seen again (a retransmitted record) change nothing.
	s.Reset()
	s.WriteAt(0, []byte(req[:20]))
	s.WriteAt(0, []byte(req))
	s.WriteAt(10, []byte(req[10:]))
	if tp := s.TraceParent(); !tp.Valid {
		t.Fatal("overlapping slices lost the header")
	}
}

func hexs(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

func TestParseResponse(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		ok       bool
		status   int
		streamed bool
	}{
		{"sse", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n\r\n", true, 200, true},
		{"chunked json", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n", true, 200, true},
		{"ollama ndjson", "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n", true, 200, true},
		{"plain json", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"ok\":true}", true, 200, false},
		{"close-delimited SSE", "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", true, 200, true},
		{"close-delimited error page", "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request", true, 400, false},
		{"error", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", true, 503, false},
		{"garbage", "\x17\x03\x03\x00\x20", false, 0, false},
		{"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", false, 0, false},
		{"signed status", "HTTP/1.1 +99 OK\r\n\r\n", false, 0, false},
		{"status below 100", "HTTP/1.1 099 OK\r\n\r\n", false, 0, false},
		{"status above 599", "HTTP/1.1 600 OK\r\n\r\n", false, 0, false},
		{"no reason phrase", "HTTP/1.1 599\r\n\r\n", true, 599, false},
		{"chunked among codings, any case", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, CHUNKED\r\n\r\n", true, 200, true},
		{"not chunked (Kelvin sign)", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chun\u212aed\r\n\r\n", true, 200, false},
		{"100 Continue then the final head", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", true, 200, true},
		{"103 Early Hints then the final head", "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
			"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, 200, true},
		{"an interim head alone", "HTTP/1.1 100 Continue\r\n\r\n", true, 100, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := ParseResponse([]byte(tt.in))
			if ok != tt.ok || r.Status != tt.status || (ok && r.Streamed() != tt.streamed) {
				t.Fatalf("got %+v ok=%v streamed=%v", r, ok, r.Streamed())
			}
		})
	}
}

func TestContentLength(t *testing.T) {
	for in, want := range map[string]int64{
		"17": 17, "0": 0, "": -1, "+5": -1, "-1": -1, "1 7": -1, "999999999999999999": 999999999999999999, "9999999999999999999": -1,
	} {
		r, ok := ParseResponse([]byte("HTTP/1.1 200 OK\r\nContent-Length: " + in + "\r\n\r\n"))
		if !ok || r.ContentLength != want {
			t.Errorf("Content-Length %q: got %d, want %d", in, r.ContentLength, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("POST /v1/chat/completions HTTP/1.1\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n{\"model\":\"m\"}"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// However the bytes are split, the traceparent found is the same.
		whole := scanTP(string(b), len(b)+1)
		if split := scanTP(string(b), 7); split != whole {
			t.Fatalf("split: %+v, whole: %+v", split, whole)
		}
		ParseResponse(b)
	})
}

// TestSniffingAllocatesNothing: the receiver reads every stream's heads
// with TraceParentScanner and ParseResponse on its hot path.
func TestSniffingAllocatesNothing(t *testing.T) {
	var s TraceParentScanner
	for _, in := range allocCorpus {
		b := []byte(in)
		if n := testing.AllocsPerRun(100, func() { s.Reset(); s.WriteAt(0, b); ParseResponse(b) }); n != 0 {
			t.Errorf("%q: %v allocations", in, n)
		}
	}
}

var allocCorpus = []string{
	"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n\r\n{\"model\": \"llama-3-8b\", \"stream\": true}",
	"POST /api/generate HTTP/1.1\r\n\r\n{\"prompt\":\"the model is\",\"model\":\"qwen2:7b\"}",
	"POST /api/chat HTTP/1.1\r\n\r\n{\"model\":\"qw",
	"GET /health HTTP/1.1\r\nHost: a",
	"POST /x HTTP/1.1\r\n\r\n{\"model\":\"a\\\"b\"}",
	"POST /x HTTP/1.1\r\n\r\n{\"model\":\"\"}",
	"POST /x#frag HTTP/1.1\r\nA: b\r\n\r\n{\"model\" :\t\"m\x01\"}",
	"POST /x HTTP/1.1\r\nA: b\r\n\r\n{\"model\":1,\"model\":\"late\"}",
	"BREW /pot HTTP/1.1\r\n\r\n",
	"get / HTTP/1.1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\n\r\n",
	"POST /v1/chat/compl",
	"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	"GET /\x00\x01 HTTP/1.1\r\n\r\n",
	"GET /" + strings.Repeat("a", 300) + " HTTP/1.1\r\n\r\n",
	"GET /" + strings.Repeat("a", 300) + "?q HTTP/1.1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n",
	"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, CHUNKED\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chun\u212aed\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunk\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Type: text/plain\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"ok\":true}",
	"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
	"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request",
	"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 +99 OK\r\n\r\n",
	"HTTP/1.1 099 OK\r\n\r\n",
	"HTTP/1.1 600 OK\r\n\r\n",
	"HTTP/1.1 599\r\n\r\n",
	"\x17\x03\x03\x00\x20",
	"HTTP/1.1 2x0 OK\r\n\r\n",
}

// The W3C rules, strictly: anything else is no traceparent at all.
func TestTraceParentIsStrict(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for v, valid := range map[string]bool{
		good: true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":            true,  // a later version
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes": true,  // its extra fields are ignored
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x":           false, // not after a dash
		good + "-extra": false, // version 00 has nothing more
		good + " ":      true,  // header values are trimmed first
		"ff" + good[2:]: false, // version ff is invalid
		"0g" + good[2:]: false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": false, // upper case
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01": false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A": false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": false, // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01": false, // zero parent id
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": false,
		good[:54]: false,
	} {
		if tp := scanTP("GET / HTTP/1.1\r\ntraceparent: "+v+"\r\n\r\n", 1<<20); tp.Valid != valid {
			t.Errorf("traceparent %q: valid %v, want %v", v, tp.Valid, valid)
		}
	}
}
