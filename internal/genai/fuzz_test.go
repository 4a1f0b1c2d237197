package genai

import (
	"testing"
)

// FuzzRequestScanner: any bytes, in any split, never panic; the results
// stay within their bounds and do not depend on how the bytes were split.
func FuzzRequestScanner(f *testing.F) {
	for _, c := range reqCases {
		if len(c.req) < 2000 {
			f.Add([]byte(c.req), uint16(7))
		}
	}
	f.Add([]byte("POST / HTTP/1.1\r\n\r\n{\"model\":\"\\"), uint16(1))
	f.Fuzz(func(t *testing.T, b []byte, split uint16) {
		var whole, parts RequestScanner
		whole.Write(b)
		n := int(split)%(len(b)+1) + 1
		for rest := b; len(rest) > 0; {
			k := min(n, len(rest))
			parts.Write(rest[:k])
			rest = rest[k:]
		}
		if string(whole.Model()) != string(parts.Model()) || string(whole.Path()) != string(parts.Path()) {
			t.Fatalf("split %d: model %q/%q path %q/%q", n, whole.Model(), parts.Model(), whole.Path(), parts.Path())
		}
		if s1, k1 := whole.Stream(); true {
			if s2, k2 := parts.Stream(); s1 != s2 || k1 != k2 {
				t.Fatalf("split %d: stream differs", n)
			}
		}
		if len(whole.Model()) > 128 || len(whole.Path()) > 256 {
			t.Fatal("out of bounds")
		}
		for _, c := range whole.Model() {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("model %q not printable", whole.Model())
			}
		}
		_ = whole.Operation()
		if a := testing.AllocsPerRun(1, func() { parts.Reset(); parts.Write(b) }); a != 0 {
			t.Fatalf("Write allocated %v times", a)
		}
	})
}

// FuzzParseTail: any bytes as a tail (and as a first body) never panic,
// keep every value within its bound, and allocate nothing that grows with
// the input.
func FuzzParseTail(f *testing.F) {
	for _, s := range streams {
		for _, w := range s.writes {
			f.Add(tailOf(w), uint8(s.want.format))
		}
	}
	f.Add([]byte(`\\\\"}}`), uint8(0))
	f.Add([]byte(`"}]}`+"\n"+`{"done":true,"eval_count":1,"prompt_eval_count":2}`), uint8(FormatOllama))
	f.Fuzz(func(t *testing.T, b []byte, format uint8) {
		r := Response{Format: Format(format % 7)}
		ParseTail(&r, b)
		ParseFirst(&r, b, b)
		if len(r.Model()) > 128 || len(r.ID()) > MaxID || len(r.FinishReasons()) > MaxFinishReasons {
			t.Fatal("out of bounds")
		}
		for _, reason := range r.FinishReasons() {
			if reason == "" || len(reason) > maxToken {
				t.Fatalf("reason %q", reason)
			}
		}
		if u := r.Usage; u.Input.N < 0 || u.Output.N < 0 || u.CacheRead.N < 0 || u.Input.N > 3e15 {
			t.Fatalf("usage %+v", u)
		}
		// After a first run has interned what it met (at most maxInterned
		// values process-wide), parsing allocates nothing.
		if a := testing.AllocsPerRun(1, func() { ParseTail(&r, b); ParseFirst(&r, b, b) }); a != 0 {
			t.Fatalf("parse allocated %v times", a)
		}
	})
}
