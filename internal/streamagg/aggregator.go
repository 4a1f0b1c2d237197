// Package streamagg turns the stream probe's records into what tokenwire
// reports: cumulative series (time to first token, duration and chunk
// interval histograms, chunk and byte totals, per process and attribute
// set) and one span record per finished stream, as plain Go values. The
// receiver translates them into OTLP; nothing here knows pdata.
//
// A stream's records arrive in order: the request's slices, the response's
// head, PROGRESS records with the kernel's running totals, and the END.
// Any of them may be missing (a full ring buffer, an evicted entry), so
// every step works from what it has, and a count only ever adds what the
// kernel counted since the stream's previous record.
package streamagg

import (
	"math"
	"net/netip"
	"sync"
	"time"

	"github.com/tokenwire/tokenwire/internal/genai"
	"github.com/tokenwire/tokenwire/internal/httpsniff"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
)

// OtherValue replaces attribute values beyond a cardinality cap.
const OtherValue = "_other"

// OtherMethod is http.request.method on the overflow series: the HTTP
// conventions' value for a method the instrumentation does not report.
const OtherMethod = "_OTHER"

// Reasons a response on a watched port is not reported as a stream.
const (
	SkipNotStreamed = "not_streamed"
	SkipNoResponse  = "no_response"
	SkipFiltered    = "filtered"
)

// SkipReasons lists every skip reason, for self-telemetry.
var SkipReasons = []string{SkipNotStreamed, SkipNoResponse, SkipFiltered}

// Config says what to keep and how much of it.
type Config struct {
	// Coalesce is the kernel's: body writes closer than this are one
	// chunk. The body bytes a head's write carried and a first chunk this
	// close after it are one chunk too.
	Coalesce time.Duration
	// MaxOpen bounds the streams between request and end; when full, the
	// least recently seen of a few entries is dropped (OnEvict), and its
	// later records are not counted.
	MaxOpen int
	// MaxPaths and MaxModels cap the distinct http.route and
	// gen_ai.request.model values; later ones are reported as OtherValue.
	// A value not seen for SeriesExpiry gives its place to a new one.
	MaxPaths, MaxModels int
	// Routes are route templates ("/v1/models/{model}:generate"): a path
	// that matches one is reported as that route. Other paths become
	// routes with numeric, UUID and long hex segments replaced by {id}.
	Routes []string
	// MaxSeries caps the series; streams of new attribute sets beyond it
	// are counted in an overflow series (OnOverflow).
	MaxSeries int
	// SeriesExpiry is how long a series of a process that exited stays
	// after its last stream (0: for good).
	SeriesExpiry time.Duration
	// Pids and ProcessNames, when set, keep only streams written by these
	// processes (by pid, or by executable name).
	Pids         []uint32
	ProcessNames []string
	// Providers names the gen_ai.provider.name of the streams served on a
	// port; it wins over the provider the wire format speaks for
	// (genai.Provider). Values are taken as they are.
	Providers map[uint16]string
	// NoResponseDetails ignores response bytes after the head (the kernel
	// sends none when stream.Config.NoResponseBodies is set, but the head's
	// own write may carry the first events).
	NoResponseDetails bool
	// Spans keeps a span record per finished stream.
	Spans bool
	// MaxSpans bounds the span records kept between two TakeSpans calls
	// (0: no bound); the spans of further streams are dropped (OnSpanDrop),
	// so a traces pipeline that stalls or lags holds at most this many.
	MaxSpans int
	// ClientHosts, when set, keeps only the client calls whose Host
	// header (without its port) is one of these.
	ClientHosts []string
	// OnSkip is called for each stream not reported, with its reason;
	// OnEvict for each open stream dropped for room; OnOverflow for each
	// stream counted in the overflow series; OnSpanDrop for each span not
	// kept for MaxSpans. Any may be nil.
	OnSkip     func(reason string)
	OnEvict    func()
	OnOverflow func()
	OnSpanDrop func()
}

// Aggregator folds stream records into series and span records. It is
// safe for concurrent use: the read loop adds while the receiver emits.
type Aggregator struct {
	cfg   Config
	procs *procinfo.Cache
	pids  map[uint32]bool
	names map[string]bool
	base  time.Time // the origin of openStream.lastSeen

	mu   sync.Mutex
	open map[stream.ID]*openStream
	// joined is room for a stream's carried line and its first body
	// write's start, read as one.
	joined [2 * stream.PeekMax]byte
	// ended are the streams ended here (idle) or dropped for room while
	// the kernel may still write about them; endedOrder the last
	// maxEnded of them in the order they were marked, the oldest at
	// endedNext once it is full.
	ended      map[stream.ID]bool
	endedOrder []stream.ID
	endedNext  int
	series     map[SeriesKey]*Series
	routes     *router
	// routes', models' (request and response) and error types' values, and
	// thread names: looked up with m[string(b)], which does not allocate,
	// they turn captured bytes into strings that are allocated once.
	paths    *values
	models   *values
	errTypes *values
	comms    map[string]string
	spans    []Span
	// Client calls (client.go): their server.address values, the hosts
	// Config.ClientHosts keeps, and the server names client connections'
	// ClientHellos asked for.
	hosts       *values
	clientHosts map[string]bool
	serverNames map[connKey]string
}

// maxComms bounds the interned thread names; maxEnded the streams ended
// by the idle timeout or dropped for room that are remembered so that
// late records of theirs are not counted twice; maxErrorTypes the
// distinct error.type values on metrics (the rest are
// genai.ErrorTypeOther).
const (
	maxComms      = 4096
	maxEnded      = 16384
	maxErrorTypes = 32
)

// New returns an aggregator. procs names the processes behind pids (for
// ProcessNames and for resources). It fails only on a bad route template.
func New(cfg Config, procs *procinfo.Cache) (*Aggregator, error) {
	routes, err := newRouter(cfg.Routes)
	if err != nil {
		return nil, err
	}
	if cfg.MaxSeries <= 0 {
		cfg.MaxSeries = math.MaxInt
	}
	expiry := cfg.SeriesExpiry
	if expiry <= 0 {
		expiry = math.MaxInt64
	}
	a := &Aggregator{
		cfg:    cfg,
		procs:  procs,
		pids:   map[uint32]bool{},
		names:  map[string]bool{},
		base:   time.Now(),
		open:   map[stream.ID]*openStream{},
		ended:  map[stream.ID]bool{},
		series: map[SeriesKey]*Series{},
		routes: routes,
		paths:  newValues(cfg.MaxPaths, expiry),
		models: newValues(cfg.MaxModels, expiry),
		// Error types are a closed vocabulary (genai's, HTTP statuses): a
		// place is kept for good once given.
		errTypes: &values{limit: maxErrorTypes, expiry: math.MaxInt64, other: genai.ErrorTypeOther,
			slots: map[string]*valueSlot{}},
		comms: map[string]string{},
	}
	for _, p := range cfg.Pids {
		a.pids[p] = true
	}
	for _, n := range cfg.ProcessNames {
		a.names[n] = true
	}
	a.initClients()
	if a.cfg.OnSkip == nil {
		a.cfg.OnSkip = func(string) {}
	}
	if a.cfg.OnEvict == nil {
		a.cfg.OnEvict = func() {}
	}
	if a.cfg.OnOverflow == nil {
		a.cfg.OnOverflow = func() {}
	}
	if a.cfg.OnSpanDrop == nil {
		a.cfg.OnSpanDrop = func() {}
	}
	return a, nil
}

// openStream is what is known of a stream between its request and its
// end: what its request and response said, and how much of the kernel's
// running totals has been counted.
type openStream struct {
	// The request, read as its slices arrive (up to
	// stream.Config.RequestCaptureBytes of head and body): its line and
	// its JSON body's model and stream flag, and its traceparent.
	req genai.RequestScanner
	tp  httpsniff.TraceParentScanner
	// What the response's first write (its head) says when it is
	// HTTP/1.x (headOK); headerLen is where its headers end within that
	// write's record (0: not within it), and headCut whether the record
	// ended before them because the write was longer than a record
	// (stream.HeadMax).
	headCut   bool
	head      httpsniff.Response
	headOK    bool
	headerLen int
	// gen is what the response's body says of itself: its first write
	// and the ends of the writes the kernel took for a stream's last
	// events. Read in http mode only.
	gen  genai.Response
	pid  uint32
	comm [16]byte
	// When the request was first read and the response's head written
	// (record times): the idle timeout's fallback before any PROGRESS.
	reqTS, respTS uint64
	// The last totals the kernel reported, and the socket's addresses from
	// the first PROGRESS: the idle timeout ends a stream from them. Before
	// a PROGRESS, the server port the payload records carry stands in.
	last          stream.Stats
	local, remote netip.AddrPort
	port          uint16

	classified bool
	skip       string // non-empty: not reported, and why
	key        SeriesKey
	ser        *Series
	span       spanHead // what the span needs of the heads (Spans on)
	cl         clientHead
	conn       connKey

	// The first write's body bytes, once counted; whether they are a
	// chunk of their own (not within Config.Coalesce of the kernel's
	// first chunk), and the interval from them to that chunk, once
	// counted.
	headBody    uint32
	headCounted bool
	headChunk   bool
	headGap     uint64
	// carry is the body line the head's write began and did not end (a
	// client's read of a TLS record that ended mid-event): the first body
	// write goes on with it.
	carry    [stream.PeekMax]byte
	carryLen int

	// lastSeen is when the last record of this stream arrived, as time
	// since Aggregator.base: a monotonic clock read is half the cost of
	// time.Now, which every record would pay.
	lastSeen time.Duration

	ttftDone   bool
	seenGapSum uint64
	seenChunks uint32
	seenBytes  uint64
}

// openStreams recycles finished openStream entries (2.3 KiB each), so that
// a stream opening does not allocate in steady state, however many are in
// flight; what a burst leaves behind goes back to the garbage collector
// within two cycles.
var openStreams = sync.Pool{New: func() any { return new(openStream) }}

func fresh() *openStream { return openStreams.Get().(*openStream) }

// release zeroes o for reuse; o must no longer be in a.open.
func release(o *openStream) {
	*o = openStream{}
	openStreams.Put(o)
}

// OpenCount reports how many streams are between request and end.
func (a *Aggregator) OpenCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.open)
}

// Add folds one record in, as stream.Tracer.Read returns them: what
// came after a stream's END was dropped there. In steady state (series,
// paths, models and processes seen before) it does not allocate unless
// spans are on.
func (a *Aggregator) Add(rec *stream.Record) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ended) > 0 && a.ended[rec.ID] {
		if rec.Kind == stream.KindEnd {
			delete(a.ended, rec.ID)
		}
		return // reported already, by the idle timeout, or dropped for room
	}
	o := a.open[rec.ID]
	if o != nil {
		o.lastSeen = time.Since(a.base)
	}
	switch rec.Kind {
	case stream.KindRequest:
		o = a.opened(o, rec.ID)
		o.notePayload(rec)
		o.req.WriteAt(int64(rec.Offset), rec.Data)
		o.tp.WriteAt(int64(rec.Offset), rec.Data)
		o.noteHost(rec)
		if o.pid == 0 {
			o.pid, o.comm = rec.PID, rec.Comm
		}
		if o.reqTS == 0 {
			o.reqTS = rec.TS
		}
	case stream.KindResponse:
		o = a.opened(o, rec.ID)
		o.notePayload(rec)
		o.response(rec.Data, rec.Total, !a.cfg.NoResponseDetails)
		o.pid, o.comm = rec.PID, rec.Comm
		o.respTS = rec.TS
	case stream.KindBody:
		o = a.opened(o, rec.ID)
		o.notePayload(rec)
		o.body(rec.Flags, rec.Data, rec.Offset, a.joined[:0])
	case stream.KindProgress:
		o = a.opened(o, rec.ID)
		if !o.remote.IsValid() {
			o.local, o.remote = rec.Stats.Local, rec.Stats.Remote
		}
		o.last = rec.Stats
		a.count(o, rec, false)
	case stream.KindTLSHello:
		a.noteHello(rec)
	case stream.KindEnd:
		if o == nil {
			o = fresh() // counted from the END record alone
			o.conn = connOf(rec.ID)
		}
		if !rec.Stats.Remote.IsValid() {
			rec.Stats.Local, rec.Stats.Remote = o.local, o.remote
		}
		delete(a.open, rec.ID)
		a.finish(o, rec)
		a.connEnded(rec)
		release(o)
	}
}

// finish counts an ended stream.
func (a *Aggregator) finish(o *openStream, rec *stream.Record) {
	if rec.Stats.HeadersTS != 0 {
		a.count(o, rec, true)
	} else {
		a.cfg.OnSkip(SkipNoResponse)
	}
}

// evict drops the open stream seen least recently of a few taken at
// random (the map's order), which is most often one whose END was lost:
// a full table is one that records were lost from. Its later records are
// not counted: opened afresh, its running totals would count again what
// its entry had counted.
func (a *Aggregator) evict() {
	const sample = 8
	var victim stream.ID
	var oldest *openStream
	n := 0
	for id, o := range a.open {
		if oldest == nil || o.lastSeen < oldest.lastSeen {
			victim, oldest = id, o
		}
		if n++; n == sample {
			break
		}
	}
	if oldest == nil {
		return
	}
	delete(a.open, victim)
	release(oldest)
	a.markEnded(victim)
	a.cfg.OnEvict()
}

// markEnded remembers a stream reported or dropped before its END, so
// that its later records are not counted (Add). Past maxEnded, the one
// marked longest ago is forgotten (if its END has not come yet): under a
// flood of evictions the streams dropped last, whose records are the
// likeliest still to come, are the ones kept.
func (a *Aggregator) markEnded(id stream.ID) {
	if len(a.endedOrder) < maxEnded {
		a.endedOrder = append(a.endedOrder, id)
	} else {
		delete(a.ended, a.endedOrder[a.endedNext])
		a.endedOrder[a.endedNext] = id
		a.endedNext = (a.endedNext + 1) % maxEnded
	}
	a.ended[id] = true
}

// opened returns o, or a new open stream for id when o is nil. A full
// table makes room by dropping one entry (its end will not be reported).
func (a *Aggregator) opened(o *openStream, id stream.ID) *openStream {
	if o != nil {
		return o
	}
	if len(a.open) >= a.cfg.MaxOpen {
		a.evict()
	}
	o = fresh()
	o.lastSeen = time.Since(a.base)
	o.conn = connOf(id)
	a.open[id] = o
	return o
}

// ExpireIdle ends the open streams with no record since before cutoff, as
// their END would have (reason idle_timeout, the last write as the end),
// from the totals their last record carried. The kernel may still write
// about them; those records are dropped.
func (a *Aggregator) ExpireIdle(cutoff time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	before := cutoff.Sub(a.base)
	n := 0
	var rec stream.Record
	for id, o := range a.open {
		if o.lastSeen >= before {
			continue
		}
		delete(a.open, id)
		rec = stream.Record{Kind: stream.KindEnd, ID: id, Reason: stream.EndIdle, Stats: o.last}
		rec.Stats.Local, rec.Stats.Remote = o.local, o.remote
		if !o.remote.IsValid() { // stuck before its first chunk: no PROGRESS
			if o.cl.client {
				rec.Stats.Remote = netip.AddrPortFrom(netip.Addr{}, o.port)
			} else {
				rec.Stats.Local = netip.AddrPortFrom(netip.Addr{}, o.port)
			}
		}
		if rec.Stats.HeadersTS == 0 && o.respTS != 0 {
			// A head and no chunk yet: the records' own times stand in.
			rec.Stats.RequestTS, rec.Stats.HeadersTS = min(o.reqTS, o.respTS), o.respTS
			if o.reqTS == 0 {
				rec.Stats.RequestTS = o.respTS
			}
		}
		rec.Stats.EndTS = lastWrite(&rec.Stats)
		rec.Stats.GapCounts = [stream.GapBuckets]uint32{} // counted with their PROGRESS
		if rec.Stats.HeadersTS == 0 {
			rec.Reason = stream.EndNoResponse
		}
		a.finish(o, &rec)
		release(o)
		a.markEnded(id)
		n++
	}
	return n
}
