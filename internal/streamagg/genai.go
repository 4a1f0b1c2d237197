package streamagg

import (
	"bytes"
	"time"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/httpsniff"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// response takes the response's first write: its head, and any body bytes
// the same write carried (a server that sends the head with the first
// event), which are read for GenAI details only when details is set.
func (o *openStream) response(data []byte, details bool) {
	o.respLen = copy(o.resp[:], data)
	head := o.resp[:o.respLen]
	o.head, o.headOK = httpsniff.ParseResponse(head)
	o.headerLen = 0
	if !o.headOK {
		return
	}
	if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
		o.headerLen = i + 4
	}
	if details {
		genai.ParseFirst(&o.gen, head, nil)
	}
}

// body takes a BODY record: the start of the first body write, or the end
// of a write the kernel took for one that may end the stream. Only an HTTP
// response's body is read: the head's Content-Type says which formats it
// may be in, and bytes that follow no HTTP head are not known to be
// events at all.
func (o *openStream) body(flags uint8, data []byte) {
	if !o.headOK {
		return
	}
	if flags&stream.BodyFirst != 0 {
		// The headers alone: body bytes the head write carried were read
		// with it.
		head := o.resp[:o.respLen]
		if o.headerLen > 0 {
			head = head[:o.headerLen]
		}
		genai.ParseFirst(&o.gen, head, data)
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
