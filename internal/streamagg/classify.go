package streamagg

import (
	"bytes"
	"time"

	"github.com/tokenwire/tokenwire/internal/httpsniff"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// classify reads the heads once: mode, attributes, whether to report, and
// what the span needs of them.
func (a *Aggregator) classify(o *openStream, st *stream.Stats) {
	o.classified = true
	if o.pid == 0 {
		o.pid = st.PID
	}
	req, reqOK := httpsniff.SniffRequest(o.req[:o.reqLen])
	resp, respOK := httpsniff.ParseResponse(o.resp[:o.respLen])
	if i := bytes.Index(o.resp[:o.respLen], []byte("\r\n\r\n")); respOK && i >= 0 {
		o.headerLen = i + 4
	}
	mode := ModeOpaque
	if respOK {
		mode = ModeHTTP
	}
	switch {
	case respOK && !resp.Streamed():
		o.skip = SkipNotStreamed
	case !a.selected(o):
		o.skip = SkipFiltered
	}
	if o.skip != "" {
		a.cfg.OnSkip(o.skip)
		return
	}
	key := SeriesKey{PID: o.pid, Port: st.Local.Port(), Mode: mode}
	if reqOK && respOK {
		now := time.Since(a.base)
		key.Method = req.Method
		key.Route = a.paths.get(a.routes.route(req.Path), now)
		if len(req.Model) > 0 {
			key.Model = a.models.get(req.Model, now)
		}
	}
	o.key = key
	if a.cfg.Spans {
		o.span = spanHead{isHTTP: respOK, status: resp.Status, traceParent: req.TraceParent}
		if reqOK && respOK {
			o.span.path, o.span.model = string(req.Path), string(req.Model)
			o.span.route = string(a.routes.route(req.Path))
		}
	}
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
