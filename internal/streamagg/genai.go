package streamagg

import (
	"bytes"
	"time"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/httpsniff"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// response takes the response's first write (data, of a write of total
// bytes): its head, and any body bytes the same write carried (a server
// that sends the head with the first event), which are read for GenAI
// details only when details is set. A body line the write began and did
// not end is kept for the first body write to go on with, when data is
// all of the write (else the rest of that line was never read); it is
// read as it is too, in case that write's start never comes.
func (o *openStream) response(data []byte, total uint32, details bool) {
	o.head, o.headOK = httpsniff.ParseResponse(data)
	o.headerLen, o.carryLen = 0, 0
	if !o.headOK {
		return
	}
	if i := bytes.Index(data, []byte("\r\n\r\n")); i >= 0 {
		o.headerLen = i + 4
	}
	// Cut by the record's size only: a record the kernel cut shorter
	// (past the ring's room for payloads) or that ended with its read is
	// read as the head it holds.
	o.headCut = o.headerLen == 0 && len(data) >= stream.HeadMax && uint32(len(data)) < total
	if !details {
		return
	}
	if o.headerLen > 0 && uint32(len(data)) == total {
		whole := o.headerLen + bytes.LastIndexByte(data[o.headerLen:], '\n') + 1
		if rest := data[whole:]; len(rest) <= len(o.carry) {
			o.carryLen = copy(o.carry[:], rest)
		}
	}
	genai.ParseFirst(&o.gen, data, nil)
}

// body takes a BODY record: the start of the first body write, or the end
// of a write the kernel took for one that may end the stream. Only an HTTP
// response's body is read: the head's Content-Type says which formats it
// may be in, and bytes that follow no HTTP head are not known to be
// events at all. offset: where data starts in its write. joined: room
// for the line the head's write left unfinished and the first body
// write's start (2 * stream.PeekMax).
func (o *openStream) body(flags uint8, data []byte, offset uint32, joined []byte) {
	if !o.headOK {
		return
	}
	if flags&stream.BodyFirst != 0 {
		// Body bytes the head write carried were read with it, but for a
		// line it left unfinished, which this write goes on with from its
		// start (the kernel passes over a buffer of chunk framing).
		first := data
		if o.carryLen > 0 && offset == 0 {
			joined = append(joined, o.carry[:o.carryLen]...)
			first = append(joined, data[:min(len(data), cap(joined)-len(joined))]...)
		}
		o.carryLen = 0
		genai.ParseFirstBody(&o.gen, o.head, first)
	}
	if flags&stream.BodyTail != 0 {
		genai.ParseTail(&o.gen, data)
	}
}

// provider returns gen_ai.provider.name for a stream on port in format f:
// the configured one, else the one the format speaks for, else "" (the
// conventions define no fallback value: the attribute is left off).
func (a *Aggregator) provider(port uint16, f genai.Format) string {
	if p, ok := a.cfg.Providers[port]; ok {
		return p
	}
	name, _ := genai.Provider(f)
	return name
}

// errorType returns a finished stream's error.type: the error the stream
// reported (genai's low-cardinality code, or _OTHER), else the HTTP status
// of a response that is an error (4xx, 5xx), else "" (no error). Distinct
// values beyond maxErrorTypes are _OTHER.
func (a *Aggregator) errorType(o *openStream) string {
	if e := o.gen.ErrorType(); e != "" {
		return a.errTypes.getString(e, time.Since(a.base))
	}
	if !o.headOK || o.head.Status < 400 {
		return ""
	}
	s := o.head.Status // 400-599: ParseResponse reads three digits
	code := [3]byte{byte('0' + s/100), byte('0' + s/10%10), byte('0' + s%10)}
	return a.errTypes.get(code[:], 0)
}
