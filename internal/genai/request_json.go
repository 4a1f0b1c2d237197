package genai

import "github.com/tokenwire/tokenwire/internal/httpsniff"

// jsonTop follows a JSON object byte by byte across writes, tracking only
// what a top-level member needs: depth, whether a string is open (and an
// escape in it), and for depth-1 members whether the next token is a key,
// its colon, its value or the comma after. It captures the values of the
// keys "model" (a string) and "stream" (true or false).
type jsonTop struct {
	depth  int32
	inStr  bool
	esc    bool
	expect uint8
	done   bool

	// The depth-1 key being read: how much of it matched each wanted key.
	inKey    bool
	keyPos   uint8
	keyMatch uint8 // bit per wanted key still matching
	member   uint8 // which wanted key the current value belongs to

	// The "model" value being read, and the last one read whole.
	capturing bool
	valBad    bool
	valLen    uint8
	val       [httpsniff.MaxModel]byte
	modelLen  uint8
	model     [httpsniff.MaxModel]byte

	// The "stream" literal being read (its first bytes), and its value.
	lit         [5]byte
	litLen      uint8
	stream      bool
	streamKnown bool
}

// What the next depth-1 token is.
const (
	expKey = iota
	expColon
	expValue
	expLiteral // inside a number or literal value
	expComma
)

// Wanted keys.
const (
	memNone = iota
	memModel
	memStream
)

var wantedKeys = [...]string{memModel: "model", memStream: "stream"}

// write reads p and returns how many bytes it used (all of them, unless
// the object ended).
func (j *jsonTop) write(p []byte) int {
	for i := 0; i < len(p); i++ {
		if j.done {
			return i
		}
		c := p[i]
		if j.inStr {
			if !j.esc && !j.inKey && !j.capturing {
				// Fast path through strings nobody reads (message contents).
				k := i
				for k < len(p) && p[k] != '"' && p[k] != '\\' {
					k++
				}
				if k == len(p) {
					return len(p)
				}
				i, c = k, p[k]
			}
			j.strByte(c)
			continue
		}
		j.token(c)
	}
	return len(p)
}

// strByte reads one byte inside a string.
func (j *jsonTop) strByte(c byte) {
	if j.esc {
		j.esc = false
		if j.inKey {
			j.keyMatch = 0 // an escaped key is not one of ours
		}
		if j.capturing {
			switch c {
			case '/', '\\', '"':
				j.valByte(c)
			default:
				j.valBad = true
			}
		}
		return
	}
	switch c {
	case '\\':
		j.esc = true
	case '"':
		j.inStr = false
		switch {
		case j.inKey:
			j.inKey = false
			j.member = memNone
			for m := memModel; m < len(wantedKeys); m++ {
				if j.keyMatch&(1<<m) != 0 && int(j.keyPos) == len(wantedKeys[m]) {
					j.member = uint8(m)
				}
			}
			j.expect = expColon
		case j.capturing:
			j.capturing = false
			if !j.valBad && j.valLen > 0 {
				j.model, j.modelLen = j.val, j.valLen
			}
			j.expect = expComma
		}
	default:
		if j.inKey {
			for m := memModel; m < len(wantedKeys); m++ {
				if int(j.keyPos) >= len(wantedKeys[m]) || wantedKeys[m][j.keyPos] != c {
					j.keyMatch &^= 1 << m
				}
			}
			if j.keyPos < 255 {
				j.keyPos++
			}
		}
		if j.capturing {
			j.valByte(c)
		}
	}
}

func (j *jsonTop) valByte(c byte) {
	if c < 0x20 || c > 0x7e || int(j.valLen) >= len(j.val) {
		j.valBad = true
		return
	}
	j.val[j.valLen] = c
	j.valLen++
}

// token reads one byte outside strings.
func (j *jsonTop) token(c byte) {
	if j.expect == expLiteral && j.depth == 1 {
		switch c {
		case ' ', '\t', '\r', '\n', ',', '}', ']':
			j.endLiteral()
		default:
			if j.member == memStream && int(j.litLen) < len(j.lit) {
				j.lit[j.litLen] = c
			}
			if j.litLen < 255 {
				j.litLen++
			}
			return
		}
	}
	switch c {
	case ' ', '\t', '\r', '\n':
	case '"':
		j.inStr = true
		if j.depth != 1 {
			return
		}
		switch j.expect {
		case expKey:
			j.inKey, j.keyPos, j.keyMatch = true, 0, 1<<memModel|1<<memStream
		case expValue:
			j.expect = expComma
			if j.member == memModel {
				j.capturing, j.valBad, j.valLen = true, false, 0
			}
		}
	case ':':
		if j.depth == 1 && j.expect == expColon {
			j.expect = expValue
		}
	case ',':
		if j.depth == 1 {
			j.expect, j.member = expKey, memNone
		}
	case '{', '[':
		if j.depth == 0 && c != '{' {
			j.done = true
			return
		}
		if j.depth == 1 && j.expect == expValue {
			j.expect = expComma
		}
		if j.depth < 1<<30 {
			j.depth++
		}
		if j.depth == 1 {
			j.expect = expKey
		}
	case '}', ']':
		j.depth--
		if j.depth <= 0 {
			j.done = true
		}
	default:
		if j.depth == 0 {
			j.done = true // not an object
			return
		}
		if j.depth == 1 && j.expect == expValue {
			j.expect, j.litLen = expLiteral, 0
			j.token(c)
		}
	}
}

// endLiteral finishes a number or literal member value.
func (j *jsonTop) endLiteral() {
	j.expect = expComma
	if j.member != memStream {
		return
	}
	switch string(j.lit[:min(int(j.litLen), len(j.lit))]) {
	case "true":
		if j.litLen == 4 {
			j.stream, j.streamKnown = true, true
		}
	case "false":
		if j.litLen == 5 {
			j.stream, j.streamKnown = false, true
		}
	}
}
