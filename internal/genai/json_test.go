package genai

import (
	"fmt"
	"strings"
	"testing"
)

// scalars lists what a walker reports, one "path=value" per scalar, with
// wild levels as "?".
func scalars(w *walker) string {
	var out []string
	for t := w.next(); t != tokNone; t = w.next() {
		if t == tokClose {
			continue
		}
		var path []string
		for l := 1; l <= w.depth && l <= maxDepth; l++ {
			switch {
			case w.kind[l] == '[':
				path = append(path, "[]")
			case w.known[l]:
				path = append(path, string(w.key[l]))
			case w.wild[l]:
				path = append(path, "?")
			default:
				path = append(path, "!")
			}
		}
		v := ""
		if t == tokString || t == tokNumber {
			v = string(w.val)
		}
		out = append(out, strings.Join(path, ".")+"="+v+fmt.Sprint(t))
	}
	return strings.Join(out, " ")
}

func TestWalkerForward(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":1,"b":{"c":"x"},"d":[true,null]}`, "a=12 b.c=x1 d.[]=3 d.[]=5"},
		{`{"a" : "x\"y" , "b":-2.5e3}`, `a=x\"y1 b=-2.5e32`},
		// Cut: the number, string and literal at the end are not reported.
		{`{"a":1,"b":12`, "a=12"},
		{`{"a":1,"b":"xy`, "a=12"},
		{`{"a":1,"b":tr`, "a=12"},
		{`{"a":1,"b"`, "a=12"},
		// Not JSON: stops where it stops being JSON.
		{`{"a":1,]`, "a=12"},
		{`{"a":1,"b":x}`, "a=12"},
		{`{"a":"x` + "\n" + `"}`, ""},
	} {
		var w walker
		w.reset([]byte(c.in), 0, 0, nil)
		if got := scalars(&w); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestAnchor(t *testing.T) {
	for _, c := range []struct {
		in    string
		start string // the bytes from the anchor on
		depth int
		want  string // the scalars from there
	}{
		{`data: {"a":{"b":1}}`, `{"a":{"b":1}}`, 0, "a.b=12"},
		// Cut inside a string: start after it.
		{`llo world","x":{"n":5}}`, `,"x":{"n":5}}`, 1, "x.n=52"},
		// Cut inside a key: its value has no key ("?"), which no rule
		// takes (see TestWildcards).
		{`ount":26,"eval_count":282}`, `:26,"eval_count":282}`, 1, "?=262 eval_count=2822"},
		// Cut inside nested objects: the opened levels are wild.
		{`1,"c":2},"d":3}}`, `1,"c":2},"d":3}}`, 3, "?.?.?=12 ?.?.c=22 ?.d=32"},
		// Escaped quotes inside a cut string are not string ends.
		{`a \"b\" c","k":"v"}`, `,"k":"v"}`, 1, "k=v1"},
		// A backslash run reaching the start: its parity is unknown.
		{`\\","k":"v"}`, `,"k":"v"}`, 1, "k=v1"},
		// An escaped backslash before a real closing quote.
		{`{"p":"a\\","k":"v"}`, `{"p":"a\\","k":"v"}`, 0, `p=a\\1 k=v1`},
		// Arrays keep their kind.
		{`2,3]}],"z":true}`, `2,3]}],"z":true}`, 4, "?.[].?.[]=22 ?.[].?.[]=32 z=3"},
	} {
		var kinds [maxDepth + 1]byte
		start, depth, ok := anchor([]byte(c.in), &kinds)
		if !ok || c.in[start:] != c.start || depth != c.depth {
			t.Errorf("%s: anchor at %q depth %d ok %v, want %q depth %d", c.in, c.in[start:], depth, ok, c.start, c.depth)
			continue
		}
		var w walker
		w.reset([]byte(c.in), start, depth, &kinds)
		if got := scalars(&w); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
	for _, in := range []string{"", "data: [DONE]", `{"a":1`, "0"} {
		var kinds [maxDepth + 1]byte
		if _, _, ok := anchor([]byte(in), &kinds); ok {
			t.Errorf("%q: anchored", in)
		}
	}
}

// TestWildcards: "*" accepts a key cut off before the bytes, a literal key
// does not, and a scalar's own key must have been read.
func TestWildcards(t *testing.T) {
	in := []byte(`e":{"input_tokens":18},"model":"m"}}`)
	var kinds [maxDepth + 1]byte
	start, depth, _ := anchor(in, &kinds)
	var w walker
	w.reset(in, start, depth, &kinds)
	var star, literal, model int
	for tk := w.next(); tk != tokNone; tk = w.next() {
		if tk == tokClose {
			continue
		}
		if w.at("*", "usage", "input_tokens") {
			star++
		}
		if w.at("response", "usage", "input_tokens") {
			literal++
		}
		if w.at("*", "model") {
			model++
		}
	}
	// "usage" itself was cut ("e":), so neither usage rule matches; the
	// model's own key was read under a wild level.
	if star != 0 || literal != 0 || model != 1 {
		t.Errorf("star %d literal %d model %d", star, literal, model)
	}
}
