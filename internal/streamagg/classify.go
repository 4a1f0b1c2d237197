package streamagg

import (
	"bytes"
	"time"

	"github.com/tokenwire/tokenwire/internal/stream"
)

// classify reads what the request and the response said by the stream's
// first chunk, once: mode, attributes, whether to report, and what the
// span needs. The series key is fixed here: a response model or format
// that only later events tell is on the span, not on the metrics.
func (a *Aggregator) classify(o *openStream, st *stream.Stats) {
	o.classified = true
	if o.pid == 0 {
		o.pid = st.PID
	}
	method, path := o.req.Method(), o.req.Path()
	reqOK := method != "" && path != nil
	respOK := o.headOK
	mode := ModeOpaque
	if respOK {
		mode = ModeHTTP
	}
	client := o.cl.client || st.Client()
	switch {
	case respOK && !o.head.Streamed() && !(o.headCut && o.head.ContentLength < 0):
		// A head longer than the kernel's record, cut before its end,
		// that named no length may name its Content-Type or
		// Transfer-Encoding after the cut: it is taken as a stream.
		o.skip = SkipNotStreamed
	case !client && !a.selected(o):
		o.skip = SkipFiltered
	}
	if o.skip != "" {
		a.cfg.OnSkip(o.skip)
		return
	}
	key := SeriesKey{PID: o.pid, Port: st.Local.Port(), Mode: mode}
	now := time.Since(a.base)
	if reqOK && respOK {
		key.Method = method
		key.Route = a.paths.get(a.routes.route(path), now)
		if m := o.req.Model(); len(m) > 0 {
			key.Model = a.models.get(m, now)
		}
		key.Operation = o.req.Operation()
	}
	if respOK {
		key.Format = o.gen.Format
		if m := o.gen.Model(); len(m) > 0 {
			key.ResponseModel = a.models.get(m, now)
		}
	}
	if client && !a.classifyClient(o, st, &key, now) {
		o.skip = SkipFiltered
		a.cfg.OnSkip(o.skip)
		return
	}
	key.Provider = a.provider(key.Port, key.Format)
	o.key = key
	if a.cfg.Spans {
		o.span = spanHead{isHTTP: respOK, status: o.head.Status, traceParent: o.tp.TraceParent()}
		if reqOK && respOK {
			o.span.route = exact(key.Route, a.routes.route(path))
			o.span.path = exact(o.span.route, path)
			o.span.model = exact(key.Model, o.req.Model())
		}
	}
}

// exact returns b as a string: interned when it is b's value (a series
// attribute that is not OtherValue, a path that is its route), which
// spares a span an allocation per value in the common case.
func exact(interned string, b []byte) string {
	if interned == string(b) {
		return interned
	}
	return string(b)
}

func (a *Aggregator) selected(o *openStream) bool {
	if len(a.pids) == 0 && len(a.names) == 0 {
		return true
	}
	if a.pids[o.pid] {
		return true
	}
	return len(a.names) > 0 && a.names[a.procs.Lookup(o.pid, a.comm(&o.comm)).Executable]
}

// comm returns a kernel thread name as an interned string.
func (a *Aggregator) comm(b *[16]byte) string {
	c := b[:]
	if i := bytes.IndexByte(c, 0); i >= 0 {
		c = c[:i]
	}
	if v, ok := a.comms[string(c)]; ok {
		return v
	}
	if len(a.comms) >= maxComms {
		clear(a.comms) // names change with pids; start over rather than grow
	}
	v := string(c)
	a.comms[v] = v
	return v
}
