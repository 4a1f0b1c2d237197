package streamagg

import (
	"bytes"
	"fmt"
	"strings"
)

// IDSegment replaces a path segment that names one resource among many
// (a number, a UUID, a long hex string) in a route.
const IDSegment = "{id}"

// router turns request paths into routes (http.route): low-cardinality
// templates for metrics. The first configured pattern that matches wins;
// otherwise ID-like segments are replaced by IDSegment.
type router struct {
	patterns []pattern
	buf      []byte // the last route built; reused, so routing allocates nothing
}

// pattern is a route template: literal segments, and segments with a
// {name} wildcard that stands for one or more characters (with a literal
// prefix or suffix around it, as in "{model}:generateContent").
type pattern struct {
	raw      []byte
	segments []segment
}

type segment struct {
	prefix, suffix []byte // the literal parts; all of it when !wild
	wild           bool
}

func (s segment) match(cur []byte) bool {
	if !s.wild {
		return bytes.Equal(s.prefix, cur)
	}
	return len(cur) > len(s.prefix)+len(s.suffix) && bytes.HasPrefix(cur, s.prefix) && bytes.HasSuffix(cur, s.suffix)
}

func newRouter(patterns []string) (*router, error) {
	r := &router{buf: make([]byte, 0, 256)}
	for _, p := range patterns {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("route %q does not start with /", p)
		}
		pat := pattern{raw: []byte(p)}
		for _, seg := range strings.Split(p[1:], "/") {
			open, close := strings.Index(seg, "{"), strings.Index(seg, "}")
			switch {
			case open < 0 && close < 0:
				pat.segments = append(pat.segments, segment{prefix: []byte(seg)})
			case open >= 0 && close > open+1 && strings.Count(seg, "{") == 1 && strings.Count(seg, "}") == 1:
				pat.segments = append(pat.segments, segment{prefix: []byte(seg[:open]), suffix: []byte(seg[close+1:]), wild: true})
			default:
				return nil, fmt.Errorf("route %q: segment %q needs one {name} at most", p, seg)
			}
		}
		r.patterns = append(r.patterns, pat)
	}
	return r, nil
}

// ValidateRoutes reports the first route pattern that cannot be used.
func ValidateRoutes(patterns []string) error {
	_, err := newRouter(patterns)
	return err
}

func (p *pattern) match(path []byte) bool {
	rest := path[1:]
	for i, seg := range p.segments {
		cur, after, more := bytes.Cut(rest, []byte("/"))
		if !seg.match(cur) {
			return false
		}
		if i == len(p.segments)-1 {
			return !more
		}
		if !more {
			return false
		}
		rest = after
	}
	return false
}

// route returns path's route, valid until the next call. path starts
// with "/" (httpsniff only reports such paths).
func (r *router) route(path []byte) []byte {
	for i := range r.patterns {
		if r.patterns[i].match(path) {
			return r.patterns[i].raw
		}
	}
	r.buf = r.buf[:0]
	rest := path[1:]
	for {
		seg, after, more := bytes.Cut(rest, []byte("/"))
		r.buf = append(r.buf, '/')
		if idLike(seg) {
			r.buf = append(r.buf, IDSegment...)
		} else {
			r.buf = append(r.buf, seg...)
		}
		if !more {
			return r.buf
		}
		rest = after
	}
}

// idLike reports whether a path segment names one resource among many: all
// digits, a UUID, or 16 or more hex digits.
func idLike(seg []byte) bool {
	if len(seg) == 0 {
		return false
	}
	digits, hex := true, true
	for _, c := range seg {
		isDigit := '0' <= c && c <= '9'
		digits = digits && isDigit
		hex = hex && (isDigit || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F')
	}
	if digits || hex && len(seg) >= 16 {
		return true
	}
	return isUUID(seg)
}

func isUUID(s []byte) bool {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return false
	}
	for i, c := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
