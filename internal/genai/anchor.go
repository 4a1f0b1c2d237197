package genai

// anchor finds where the walker can start in b, a line whose last byte
// ends a JSON object but whose start may have been cut anywhere, even
// inside a string: the earliest index outside every string, the depth
// there, and the kinds of the levels opened before it (into kinds).
//
// Why backwards: the end of the line is known to be outside any string at
// depth 0, and reading back from a known state is exact. A quote closes a
// string read backwards unless an odd run of backslashes precedes it;
// when the run reaches the start of b its parity is unknown and so is
// everything before it, so the scan stops there. It also stops at the
// top-level object's opening brace (anything before it, such as "data: ",
// is not JSON) and at brackets that do not pair up. ok is false when b
// does not end with '}'.
func anchor(b []byte, kinds *[maxDepth + 1]byte) (start, depth int, ok bool) {
	n := len(b)
	if n == 0 || b[n-1] != '}' {
		return 0, 0, false
	}
	d := 0 // depth just after b[i]
	start, sd := n, 0
	for i := n - 1; i >= 0; i-- {
		switch c := b[i]; c {
		case '}', ']':
			d++
			if d <= maxDepth {
				kinds[d] = openerOf(c)
			}
		case '{', '[':
			if d == 0 || d <= maxDepth && kinds[d] != c {
				return start, sd, start < n
			}
			d--
			if d == 0 {
				return i, 0, true
			}
		case '"':
			o := openingQuote(b, i)
			if o < 0 {
				return start, sd, start < n
			}
			i = o
		}
		start, sd = i, d
	}
	return start, sd, true
}

func openerOf(c byte) byte {
	if c == ']' {
		return '['
	}
	return '{'
}

// openingQuote returns the index of the quote that opens the string whose
// closing quote is b[end], or -1 when it cannot be known: b starts inside
// the string, a backslash run reaches b's start, or a raw control byte
// (never inside a JSON string) shows the bytes are not what they seem.
func openingQuote(b []byte, end int) int {
	for j := end - 1; j >= 0; j-- {
		c := b[j]
		if c < 0x20 {
			return -1
		}
		if c != '"' {
			continue
		}
		k := j - 1
		for k >= 0 && b[k] == '\\' {
			k--
		}
		if k < 0 && k != j-1 {
			return -1 // the backslash run reaches the start: parity unknown
		}
		if (j-1-k)%2 == 0 {
			return j
		}
	}
	return -1
}
