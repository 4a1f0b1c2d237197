package genai

// maxDepth is how many levels of nesting the walker keeps keys for. The
// deepest value any format rule reads is at depth 4; deeper values are
// walked over and never matched.
const maxDepth = 8

// tok is what the walker found next.
type tok uint8

const (
	tokNone   tok = iota // the end: the bytes ran out, were cut, or are not JSON
	tokString            // a string value (w.val: its raw bytes, w.esc: escapes in them)
	tokNumber            // a number (w.val)
	tokTrue
	tokFalse
	tokNull
	tokClose // an object or array closed; w.closed is its level
)

// walker reads one JSON value leniently and without allocating, reporting
// each scalar with the keys that lead to it. It may start in the middle
// of a value (after anchor), at a known depth whose keys are unknown
// ("wild"), and stops quietly where the bytes end or stop being JSON, so a
// cut value yields what it holds up to the cut and nothing invented.
//
// Levels count from 1 (the top-level object). key[L] is the key of the
// member of the level-L object being read; a value at depth d is reached
// through key[1..d].
type walker struct {
	b      []byte
	i      int
	depth  int
	kind   [maxDepth + 1]byte   // '{' or '[' per level, 0 when not known
	key    [maxDepth + 1][]byte // the current member's key, when known
	known  [maxDepth + 1]bool   // key[L] was read (and holds no escapes)
	wild   [maxDepth + 1]bool   // level L opened before b starts: any key may be current
	val    []byte
	esc    bool
	closed int
	done   bool
}

// reset starts the walker at b[start:] at the given depth, whose levels
// have the given kinds and unknown keys.
func (w *walker) reset(b []byte, start, depth int, kinds *[maxDepth + 1]byte) {
	*w = walker{b: b, i: start, depth: depth}
	for l := 1; l <= depth && l <= maxDepth; l++ {
		w.kind[l] = kinds[l]
		w.wild[l] = true
	}
}

// next advances to the next scalar or closing bracket.
func (w *walker) next() tok {
	for !w.done && w.i < len(w.b) {
		c := w.b[w.i]
		switch c {
		case ' ', '\t', '\r', '\n', ':':
			// A colon is consumed with its key; one seen here follows a key
			// cut off before the bytes start.
			w.i++
		case '{', '[':
			w.i++
			w.depth++
			if l := w.depth; l <= maxDepth {
				w.kind[l], w.key[l], w.known[l], w.wild[l] = c, nil, false, false
			}
		case '}', ']':
			w.i++
			open := byte('{')
			if c == ']' {
				open = '['
			}
			if w.depth <= 0 || w.depth <= maxDepth && w.kind[w.depth] != 0 && w.kind[w.depth] != open {
				w.done = true // unbalanced: not JSON
				return tokNone
			}
			w.closed = w.depth
			w.depth--
			if w.depth == 0 {
				w.done = true // the value is complete; what follows is not ours
			}
			return tokClose
		case ',':
			w.i++
			if l := w.depth; l >= 1 && l <= maxDepth {
				w.key[l], w.known[l], w.wild[l] = nil, false, false
			}
		case '"':
			s, esc, end, ok := scanString(w.b, w.i)
			if !ok {
				w.done = true // cut inside a string
				return tokNone
			}
			j := skipSpace(w.b, end)
			if j == len(w.b) {
				w.done = true // cut before telling a key from a value
				return tokNone
			}
			if w.b[j] == ':' {
				w.i = j + 1
				if l := w.depth; l >= 1 && l <= maxDepth {
					w.key[l], w.known[l], w.wild[l] = s, !esc, false
				}
				continue
			}
			w.i = end
			w.val, w.esc = s, esc
			return tokString
		case 't', 'f', 'n':
			lit, t := literalOf(c)
			if len(w.b)-w.i < len(lit) || string(w.b[w.i:w.i+len(lit)]) != lit {
				w.done = true // cut, or not JSON
				return tokNone
			}
			w.i += len(lit)
			return t
		default:
			if c != '-' && (c < '0' || c > '9') {
				w.done = true
				return tokNone
			}
			j := w.i + 1
			for j < len(w.b) && isNumberByte(w.b[j]) {
				j++
			}
			if j == len(w.b) {
				w.done = true // a number is only whole once a delimiter follows
				return tokNone
			}
			w.val, w.i = w.b[w.i:j], j
			return tokNumber
		}
	}
	w.done = true
	return tokNone
}

func literalOf(c byte) (string, tok) {
	switch c {
	case 't':
		return "true", tokTrue
	case 'f':
		return "false", tokFalse
	}
	return "null", tokNull
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// scanString reads the string whose opening quote is at b[i]: its raw
// bytes, whether they hold escapes, and the index after its closing quote.
// ok is false when b ends inside it or it holds a raw control byte.
func scanString(b []byte, i int) (s []byte, esc bool, end int, ok bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '\\':
			esc = true
			j++
		case c == '"':
			return b[i+1 : j], esc, j + 1, true
		case c < 0x20:
			return nil, false, 0, false
		}
	}
	return nil, false, 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// at reports whether the current scalar's path is path. An element is a
// key, "[]" for an array level, or "*" for any key (or a wild one: a
// level opened before the bytes start). The scalar's own key must have
// been read.
func (w *walker) at(path ...string) bool {
	return w.depth == len(path) && w.matches(path, true)
}

// closedAt reports whether the container that just closed (tokClose) is
// reached through path.
func (w *walker) closedAt(path ...string) bool {
	return w.closed == len(path)+1 && w.matches(path, false)
}

func (w *walker) matches(path []string, last bool) bool {
	for i, elem := range path {
		l := i + 1
		if l > maxDepth {
			return false
		}
		switch w.kind[l] {
		case '[':
			if elem != "[]" {
				return false
			}
		case '{':
			if elem == "[]" {
				return false
			}
			if elem == "*" && (w.wild[l] || w.known[l]) && !(last && l == len(path) && w.wild[l]) {
				continue
			}
			if !w.known[l] || string(w.key[l]) != elem {
				return false
			}
		default:
			return false
		}
	}
	return true
}
