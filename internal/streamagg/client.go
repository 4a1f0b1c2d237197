package streamagg

import (
	"bytes"
	"cmp"
	"net/netip"
	"time"

	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/tlshello"
)

// Client connections (stream.Stats.Client): calls this host made to a
// configured remote port. Their series and spans are the server's with
// the roles swapped: Port is the server's (remote) port, ServerAddress
// the request's Host header (without its port), else the server name
// the connection's TLS ClientHello asked for (a call whose request is
// not read), else the server's IP; and the kernel already selected their
// processes, so Config.Pids and Config.ProcessNames (the servers' filter)
// do not apply; Config.ClientHosts does.

// maxHostLen bounds a Host header value kept per open call: a DNS name
// is at most 253 bytes.
const maxHostLen = 256

// clientHead is what an open client call keeps of its request for its
// series and span: whether it is a client call, and the Host header.
type clientHead struct {
	client  bool
	host    [maxHostLen]byte
	hostLen int
}

// connKey names a connection: its socket and the generation of the
// socket's state (stream.ID without the call's number).
type connKey struct{ sock, gen uint64 }

func connOf(id stream.ID) connKey { return connKey{id.Sock, id.Gen} }

// maxServerNames bounds the client connections whose server name is
// kept. A connection that closes between calls sends no END, so its name
// is dropped only when the table is full: one entry, at random.
const maxServerNames = 4096

// initClients sets up what client calls need of the aggregator.
func (a *Aggregator) initClients() {
	a.serverNames = map[connKey]string{}
	a.clientHosts = map[string]bool{}
	for _, h := range a.cfg.ClientHosts {
		a.clientHosts[h] = true
	}
	// server.address is bounded like the models: a busy agent calls few
	// hosts, junk must not take every place for good.
	a.hosts = newValues(a.cfg.MaxModels, a.models.expiry)
}

// notePayload takes what every payload record (request, response head,
// body) says of its stream: its server's port, and whether it is a
// client's call. Any of them may be the first to arrive: the ones before
// it may have been shed. Stats records carry both themselves
// (stream.Stats).
func (o *openStream) notePayload(rec *stream.Record) {
	o.port = cmp.Or(o.port, rec.Port)
	o.cl.client = o.cl.client || rec.Client
}

// noteHost reads a client call's Host header from its request's first
// slice (the head; a head longer than a slice loses it).
func (o *openStream) noteHost(rec *stream.Record) {
	if !rec.Client || rec.Offset != 0 {
		return
	}
	if h := hostOf(rec.Data); h != nil {
		o.cl.hostLen = copy(o.cl.host[:], h)
	}
}

// noteHello keeps the server name a client connection's ClientHello
// asked for, if any.
func (a *Aggregator) noteHello(rec *stream.Record) {
	name := tlshello.ServerName(rec.Data)
	if name == nil {
		return
	}
	k := connOf(rec.ID)
	if _, ok := a.serverNames[k]; !ok && len(a.serverNames) >= maxServerNames {
		for victim := range a.serverNames {
			delete(a.serverNames, victim)
			break
		}
	}
	a.serverNames[k] = string(name)
}

// connEnded forgets the server name of a connection whose END says it
// closed.
func (a *Aggregator) connEnded(rec *stream.Record) {
	switch rec.Reason {
	case stream.EndClose, stream.EndClientClosed, stream.EndReset:
		if len(a.serverNames) > 0 {
			delete(a.serverNames, connOf(rec.ID))
		}
	}
}

// hostOf returns a request head's Host header value without its port
// (server.address), or nil when the head has none.
func hostOf(head []byte) []byte {
	end := bytes.Index(head, []byte("\r\n\r\n"))
	if end < 0 {
		end = len(head)
	}
	for line := range bytes.Lines(head[:end]) {
		if len(line) < 5 || line[4] != ':' || !bytes.EqualFold(line[:4], []byte("host")) {
			continue
		}
		v := bytes.TrimSpace(line[5:])
		if len(v) > 0 && v[0] == '[' { // [IPv6]:port
			if i := bytes.IndexByte(v, ']'); i > 0 {
				return v[1:i]
			}
			return nil
		}
		if i := bytes.LastIndexByte(v, ':'); i >= 0 {
			v = v[:i]
		}
		if len(v) == 0 {
			return nil
		}
		return v
	}
	return nil
}

// classifyClient fixes a client call's series key: the server's port and
// address, the GenAI attributes (no http.method or route: the client
// conventions have none), or skips it when Config.ClientHosts does not
// list its host.
func (a *Aggregator) classifyClient(o *openStream, st *stream.Stats, key *SeriesKey, now time.Duration) bool {
	host := o.cl.host[:o.cl.hostLen]
	sni := ""
	if len(host) == 0 {
		sni = a.serverNames[o.conn]
	}
	if len(a.clientHosts) > 0 && !a.clientHosts[string(host)] && !a.clientHosts[sni] {
		return false
	}
	key.Client = true
	key.Port = st.Remote.Port()
	key.Method, key.Route = "", ""
	switch {
	case len(host) > 0:
		key.ServerAddress = a.hosts.get(host, now)
	case sni != "":
		key.ServerAddress = a.hosts.getString(sni, now)
	case st.Remote.IsValid():
		key.ServerAddress = a.hosts.getString(st.Remote.Addr().Unmap().String(), now)
	}
	return true
}

// clientSpan makes sp a client call's: the server it called, the
// request's method (the series key has none), no client peer.
func clientSpan(sp *Span, o *openStream, st *stream.Stats) {
	sp.ClientCall = true
	sp.ServerAddress = o.key.ServerAddress
	sp.Server = st.Remote
	sp.Client = netip.AddrPort{}
	if sp.IsHTTP && o.span.path != "" {
		sp.Method = o.req.Method()
	}
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// ttftBounds are the time-to-first-chunk bounds of a server's or a
// client's series.
func ttftBounds(client bool) []float64 {
	if client {
		return TTFCBounds
	}
	return TTFTBounds
}
