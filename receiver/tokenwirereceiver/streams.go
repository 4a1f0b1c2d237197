package tokenwirereceiver

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/tokenwire/tokenwire/internal/httpsniff"
	"github.com/tokenwire/tokenwire/internal/procinfo"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// otherValue replaces attribute values beyond a cardinality cap.
const otherValue = "_other"

// Reasons a response on a watched port is not reported as a stream.
const (
	skipNotStreamed = "not_streamed"
	skipNoResponse  = "no_response"
	skipFiltered    = "filtered"
)

// seriesKey is one attribute set of the stream metrics, under one process.
type seriesKey struct {
	pid                 uint32
	port                uint16
	method, path, model string
	mode                metadata.AttributeTokenwireStreamMode
}

type streamSeries struct {
	ttft, duration, interval *histogram
	chunks, bytes            int64
}

// openStream is what the receiver knows of a stream between its request
// and its end: the heads of request and response, and how much of the
// kernel's running totals it has already counted.
type openStream struct {
	req     [2 * stream.PeekMax]byte
	reqLen  int
	resp    [stream.PeekMax]byte
	respLen int
	pid     uint32
	comm    [16]byte
	// The socket's addresses, from the kernel's first PROGRESS record: an
	// END made by the idle timeout (from the kernel's state, which has no
	// addresses) takes them from here.
	local, remote netip.AddrPort

	classified bool
	skip       string // non-empty: not reported, and why
	key        seriesKey
	ser        *streamSeries // key's series, once counted
	// request and response are parsed only for spans (traceparent, raw
	// path, status); the metrics path reads the heads in classify.
	request  httpsniff.Request
	response httpsniff.Response
	isHTTP   bool

	// headerLen is where the response's headers end in its first write
	// (0: not within the captured head).
	headerLen int
	// The first write's body bytes, once counted, and the interval from it
	// to the kernel's first chunk, once counted.
	headBody    uint32
	headCounted bool
	headGap     uint64

	// lastSeen is when the last record of this stream arrived, as time
	// since streamStats.base: a monotonic clock read is half the cost of
	// time.Now, which every record would pay.
	lastSeen time.Duration

	ttftDone   bool
	seenGapSum uint64
	seenChunks uint32
	seenBytes  uint64
}

// streamStats turns stream records into metrics and spans.
type streamStats struct {
	cfg   *StreamsConfig
	procs *procinfo.Cache
	// wallOffset converts kernel monotonic ns to Unix ns.
	wallOffset int64
	base       time.Time // the origin of openStream.lastSeen
	onSkip     func(reason string)
	onEvict    func()

	mu     sync.Mutex
	series map[seriesKey]*streamSeries
	open   map[stream.ID]*openStream
	// paths and models map each value seen (up to the caps) to itself,
	// and comms thread names to themselves: looked up with m[string(b)],
	// which does not allocate, they turn captured bytes into strings that
	// are allocated once.
	paths   map[string]string
	models  map[string]string
	comms   map[string]string
	pids    map[uint32]bool
	names   map[string]bool
	spans   map[uint32]ptrace.SpanSlice // by pid, waiting for the next flush
	pending ptrace.Traces
}

// maxComms bounds the interned thread names.
const maxComms = 4096

// openStreams recycles finished openStream entries (1.5 KiB each), so that
// a stream opening does not allocate in steady state, however many are in
// flight; what a burst leaves behind goes back to the garbage collector
// within two cycles.
var openStreams = sync.Pool{New: func() any { return new(openStream) }}

func newStreamStats(cfg *StreamsConfig, wallOffset int64, onSkip func(string), onEvict func()) *streamStats {
	s := &streamStats{
		cfg:        cfg,
		procs:      procinfo.NewCache(4096),
		wallOffset: wallOffset,
		base:       time.Now(),
		onSkip:     onSkip,
		onEvict:    onEvict,
		series:     map[seriesKey]*streamSeries{},
		open:       map[stream.ID]*openStream{},
		paths:      map[string]string{},
		models:     map[string]string{},
		comms:      map[string]string{},
		pids:       map[uint32]bool{},
		names:      map[string]bool{},
		pending:    ptrace.NewTraces(),
	}
	for _, p := range cfg.Pids {
		s.pids[uint32(p)] = true
	}
	for _, n := range cfg.ProcessNames {
		s.names[n] = true
	}
	return s
}

// openCount reports how many streams are between request and end.
func (s *streamStats) openCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// openNew adds an open stream for id, making room when the table is
// full (the evicted stream's end will not be reported).
func (s *streamStats) openNew(id stream.ID) *openStream {
	if len(s.open) >= s.cfg.MaxSockets {
		for victim, v := range s.open {
			delete(s.open, victim)
			s.release(v)
			s.onEvict()
			break
		}
	}
	o := s.fresh()
	s.open[id] = o
	return o
}

// fresh returns a zeroed openStream, reused when one is free.
func (s *streamStats) fresh() *openStream { return openStreams.Get().(*openStream) }

// release zeroes o for reuse; o must no longer be in s.open.
func (s *streamStats) release(o *openStream) {
	*o = openStream{}
	openStreams.Put(o)
}

// idle lists the open streams with no record since before cutoff.
func (s *streamStats) idle(cutoff time.Time) []stream.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []stream.ID
	before := cutoff.Sub(s.base)
	for id, o := range s.open {
		if o.lastSeen < before {
			ids = append(ids, id)
		}
	}
	return ids
}

// forget drops an open stream whose socket the kernel no longer tracks.
func (s *streamStats) forget(id stream.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o, ok := s.open[id]; ok {
		delete(s.open, id)
		s.release(o)
	}
}

// add folds one record in. In steady state (series, paths, models and
// processes seen before) it does not allocate unless spans are on.
func (s *streamStats) add(rec *stream.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.open[rec.ID]
	if o != nil {
		o.lastSeen = time.Since(s.base)
	}
	switch rec.Kind {
	case stream.KindRequest:
		o = s.opened(o, rec.ID)
		if off := int(rec.Offset); off < len(o.req) {
			n := copy(o.req[off:], rec.Data)
			o.reqLen = max(o.reqLen, off+n)
		}
		if o.pid == 0 {
			o.pid, o.comm = rec.PID, rec.Comm
		}
	case stream.KindResponse:
		o = s.opened(o, rec.ID)
		o.respLen = copy(o.resp[:], rec.Data)
		o.pid, o.comm = rec.PID, rec.Comm
	case stream.KindProgress:
		o = s.opened(o, rec.ID)
		if !o.remote.IsValid() {
			o.local, o.remote = rec.Stats.Local, rec.Stats.Remote
		}
		s.count(o, rec, false)
	case stream.KindEnd:
		if o == nil {
			o = s.fresh() // counted from the END record alone
		}
		if !rec.Stats.Remote.IsValid() {
			rec.Stats.Local, rec.Stats.Remote = o.local, o.remote
		}
		delete(s.open, rec.ID)
		if rec.Stats.HeadersTS != 0 {
			s.count(o, rec, true)
		} else {
			s.onSkip(skipNoResponse)
		}
		s.release(o)
	}
}

// opened returns o, or a new open stream for id when o is nil.
func (s *streamStats) opened(o *openStream, id stream.ID) *openStream {
	if o == nil {
		o = s.openNew(id)
		o.lastSeen = time.Since(s.base)
	}
	return o
}

// classify reads the heads once: mode, attributes, and whether to report.
func (s *streamStats) classify(o *openStream, st *stream.Stats) {
	o.classified = true
	if o.pid == 0 {
		o.pid = st.PID
	}
	req, reqOK := httpsniff.SniffRequest(o.req[:o.reqLen])
	resp, respOK := httpsniff.ParseResponse(o.resp[:o.respLen])
	streamed := resp.Streamed()
	o.isHTTP = respOK
	if i := bytes.Index(o.resp[:o.respLen], []byte("\r\n\r\n")); respOK && i >= 0 {
		o.headerLen = i + 4
	}
	mode := metadata.AttributeTokenwireStreamModeOpaque
	if respOK {
		mode = metadata.AttributeTokenwireStreamModeHTTP
	}
	switch {
	case respOK && !streamed:
		o.skip = skipNotStreamed
	case !s.selected(o):
		o.skip = skipFiltered
	}
	if o.skip != "" {
		s.onSkip(o.skip)
		return
	}
	key := seriesKey{pid: o.pid, port: st.Local.Port(), mode: mode}
	if reqOK && respOK {
		key.method = req.Method
		key.path = capped(s.paths, s.cfg.MaxPaths, req.Path)
		if len(req.Model) > 0 {
			key.model = capped(s.models, s.cfg.MaxModels, req.Model)
		}
	}
	o.key = key
	if s.cfg.Spans {
		o.request, _ = httpsniff.ParseRequest(o.req[:o.reqLen])
		o.response = resp
	}
}

func (s *streamStats) selected(o *openStream) bool {
	if len(s.pids) == 0 && len(s.names) == 0 {
		return true
	}
	if s.pids[o.pid] {
		return true
	}
	return len(s.names) > 0 && s.names[s.procs.Lookup(o.pid, s.comm(&o.comm)).Executable]
}

// comm returns a kernel thread name as an interned string.
func (s *streamStats) comm(b *[16]byte) string {
	c := b[:]
	if i := bytes.IndexByte(c, 0); i >= 0 {
		c = c[:i]
	}
	if v, ok := s.comms[string(c)]; ok {
		return v
	}
	if len(s.comms) >= maxComms {
		clear(s.comms) // names change with pids; start over rather than grow
	}
	v := string(c)
	s.comms[v] = v
	return v
}

// capped returns v as a string while fewer than limit distinct values
// were seen, then _other for new ones. A value seen before costs no
// allocation.
func capped(seen map[string]string, limit int, v []byte) string {
	if s, ok := seen[string(v)]; ok {
		return s
	}
	if len(seen) >= limit {
		return otherValue
	}
	s := string(v)
	seen[s] = s
	return s
}

// count adds what the kernel counted since the stream's previous record.
func (s *streamStats) count(o *openStream, rec *stream.Record, end bool) {
	st := &rec.Stats
	if !o.classified {
		s.classify(o, st)
	}
	if o.skip != "" {
		return
	}
	ser := o.ser
	if ser == nil {
		if ser = s.series[o.key]; ser == nil {
			ser = &streamSeries{
				ttft:     newHistogram(&ttftDef),
				duration: newHistogram(&requestDurationDef),
				interval: newHistogram(&chunkIntervalDef),
			}
			s.series[o.key] = ser
		}
		o.ser = ser
	}
	// A head write that carried body bytes is the stream's first chunk:
	// the kernel counts chunks from the next write on.
	if !o.headCounted && st.HeadBytes != 0 {
		o.headCounted = true
		if o.headBody = st.HeadBody(o.headerLen); o.headBody > 0 {
			ser.chunks++
			ser.bytes += int64(o.headBody)
		}
	}
	if o.headBody > 0 && o.headGap == 0 && st.FirstChunkTS != 0 {
		o.headGap = st.FirstChunkTS - st.HeadersTS
		ser.interval.observe(chunkIntervalDef.bounds, seconds(o.headGap))
	}
	if first := o.firstChunkTS(st); !o.ttftDone && first != 0 {
		o.ttftDone = true
		ser.ttft.observe(ttftDef.bounds, seconds(first-st.RequestTS))
	}
	ser.interval.addCounts(st.GapCounts[:], seconds(st.GapSum-o.seenGapSum))
	ser.chunks += int64(st.Chunks - o.seenChunks)
	ser.bytes += int64(st.Bytes - o.seenBytes)
	o.seenGapSum, o.seenChunks, o.seenBytes = st.GapSum, st.Chunks, st.Bytes
	if end {
		ser.duration.observe(requestDurationDef.bounds, seconds(st.EndTS-st.RequestTS))
		if s.cfg.Spans {
			s.span(o, rec)
		}
	}
}

// firstChunkTS is when the first body bytes were written: with the head
// when it carried body, else the kernel's first chunk.
func (o *openStream) firstChunkTS(st *stream.Stats) uint64 {
	if o.headBody > 0 {
		return st.HeadersTS
	}
	return st.FirstChunkTS
}

func seconds(ns uint64) float64 { return float64(ns) / 1e9 }

func (s *streamStats) wall(ns uint64) pcommon.Timestamp {
	return pcommon.Timestamp(int64(ns) + s.wallOffset)
}

// span records one SERVER span for a finished stream, joining the caller's
// trace when the request carried a traceparent.
func (s *streamStats) span(o *openStream, rec *stream.Record) {
	st := &rec.Stats
	spans, ok := s.spans[o.pid]
	if !ok {
		if s.spans == nil {
			s.spans = map[uint32]ptrace.SpanSlice{}
		}
		rs := s.pending.ResourceSpans().AppendEmpty()
		s.processResource(o.pid, s.comm(&o.comm), rs.Resource())
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName(metadata.ScopeName)
		spans = ss.Spans()
		s.spans[o.pid] = spans
	}
	sp := spans.AppendEmpty()
	var id [8]byte
	binary.LittleEndian.PutUint64(id[:], rand.Uint64()|1)
	sp.SetSpanID(id)
	if tp := o.request.TraceParent; tp.Valid {
		sp.SetTraceID(tp.TraceID)
		sp.SetParentSpanID(tp.SpanID)
	} else {
		var tid [16]byte
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64()|1)
		sp.SetTraceID(tid)
	}
	sp.SetKind(ptrace.SpanKindServer)
	if o.key.method != "" {
		sp.SetName(o.key.method + " " + o.request.Path)
	} else {
		sp.SetName("stream " + strconv.Itoa(int(o.key.port)))
	}
	sp.SetStartTimestamp(s.wall(st.RequestTS))
	sp.SetEndTimestamp(s.wall(st.EndTS))
	a := sp.Attributes()
	a.EnsureCapacity(14) // the most a span gets: grown once, not per attribute
	if o.key.method != "" {
		a.PutStr("http.request.method", o.key.method)
		a.PutStr("url.path", o.request.Path)
	}
	if o.isHTTP {
		a.PutInt("http.response.status_code", int64(o.response.Status))
		if o.response.Status >= 500 {
			sp.Status().SetCode(ptrace.StatusCodeError)
		}
	}
	if o.request.Model != "" {
		a.PutStr("gen_ai.request.model", o.request.Model)
	}
	a.PutInt("server.port", int64(o.key.port))
	if st.Remote.IsValid() { // unknown for an idle stream that never sent a chunk
		a.PutStr("client.address", st.Remote.Addr().Unmap().String())
		a.PutInt("client.port", int64(st.Remote.Port()))
	}
	a.PutStr("tokenwire.stream.mode", o.key.mode.String())
	a.PutStr("tokenwire.stream.end_reason", rec.Reason.String())
	chunks, body := int64(st.Chunks), int64(st.Bytes)
	if o.headBody > 0 {
		chunks++
		body += int64(o.headBody)
	}
	a.PutInt("tokenwire.stream.chunks", chunks)
	a.PutInt("tokenwire.stream.bytes", body)
	if first := o.firstChunkTS(st); first != 0 {
		a.PutDouble("gen_ai.response.time_to_first_chunk", seconds(first-st.RequestTS))
		ev := sp.Events().AppendEmpty()
		ev.SetName("first_chunk")
		ev.SetTimestamp(s.wall(first))
	}
	a.PutDouble("tokenwire.stream.chunk.interval.max", seconds(max(st.GapMax, o.headGap)))
}

// processResource describes the process that wrote a stream.
func (s *streamStats) processResource(pid uint32, comm string, res pcommon.Resource) {
	info := s.procs.Lookup(pid, comm)
	a := res.Attributes()
	a.PutInt("process.pid", int64(pid))
	if info.Executable != "" {
		a.PutStr("process.executable.name", info.Executable)
	}
	if info.ContainerID != "" {
		a.PutStr("container.id", info.ContainerID)
	}
}

// takeSpans returns the spans gathered since the previous call.
func (s *streamStats) takeSpans() ptrace.Traces {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.pending
	s.pending = ptrace.NewTraces()
	s.spans = nil
	return out
}

// record writes the cumulative stream metrics: sums through mb, one
// resource per process, histograms next to them.
func (s *streamStats) record(mb *metadata.MetricsBuilder, md pmetric.Metrics, host string, start, now pcommon.Timestamp) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byPID := map[uint32][]seriesKey{}
	for k := range s.series {
		byPID[k.pid] = append(byPID[k.pid], k)
	}
	for pid, keys := range byPID {
		info := s.procs.Lookup(pid, "")
		rb := mb.NewResourceBuilder()
		if host != "" {
			rb.SetHostName(host)
		}
		rb.SetProcessPid(int64(pid))
		if info.Executable != "" {
			rb.SetProcessExecutableName(info.Executable)
		}
		if info.ContainerID != "" {
			rb.SetContainerID(info.ContainerID)
		}
		res := rb.Emit()
		for _, k := range keys {
			ser := s.series[k]
			mb.RecordTokenwireStreamChunksDataPoint(now, ser.chunks, int64(k.port), k.method, k.path, k.model, k.mode)
			mb.RecordTokenwireStreamBytesDataPoint(now, ser.bytes, int64(k.port), k.method, k.path, k.model, k.mode)
		}
		mb.EmitForResource(metadata.WithResource(res))
		// The builder's buffer is only handed out by Emit, so histograms
		// go into md under the same resource; mergeResources joins them.
		rm := md.ResourceMetrics().AppendEmpty()
		res.CopyTo(rm.Resource())
		sm := rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(metadata.ScopeName)
		for _, def := range []*histogramDef{&ttftDef, &requestDurationDef, &chunkIntervalDef} {
			var dps pmetric.HistogramDataPointSlice
			for _, k := range keys {
				ser := s.series[k]
				h := ser.ttft
				switch def {
				case &requestDurationDef:
					h = ser.duration
				case &chunkIntervalDef:
					h = ser.interval
				}
				if h.count == 0 {
					continue
				}
				if dps == (pmetric.HistogramDataPointSlice{}) {
					dps = newHistogramMetric(sm.Metrics(), def).Histogram().DataPoints()
				}
				attrs := h.appendTo(dps, def, start, now).Attributes()
				attrs.PutInt("server.port", int64(k.port))
				attrs.PutStr("http.request.method", k.method)
				attrs.PutStr("url.path", k.path)
				attrs.PutStr("gen_ai.request.model", k.model)
				attrs.PutStr("tokenwire.stream.mode", k.mode.String())
			}
		}
	}
}

// mergeResources moves every resource of src into dst, joining it with a
// resource of dst that has the same attributes (same scope too).
func mergeResources(dst, src pmetric.Metrics) {
	srms := src.ResourceMetrics()
	for i := range srms.Len() {
		srm := srms.At(i)
		if srm.ScopeMetrics().Len() == 0 || srm.ScopeMetrics().At(0).Metrics().Len() == 0 {
			continue
		}
		drms := dst.ResourceMetrics()
		joined := false
		for j := range drms.Len() {
			drm := drms.At(j)
			if drm.Resource().Attributes().Equal(srm.Resource().Attributes()) && drm.ScopeMetrics().Len() > 0 {
				srm.ScopeMetrics().At(0).Metrics().MoveAndAppendTo(drm.ScopeMetrics().At(0).Metrics())
				joined = true
				break
			}
		}
		if !joined {
			srm.CopyTo(drms.AppendEmpty())
		}
	}
}
