package teststack

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DoneMode is how an SSEServer sends "data: [DONE]" after its events.
type DoneMode int

const (
	// DoneNone sends no [DONE]: the chunked terminator ends the body.
	DoneNone DoneMode = iota
	// DoneFlushed flushes [DONE] as its own chunk one interval after the
	// last event, as Go and uvicorn servers send it; the terminator
	// follows in a write of its own when the handler returns.
	DoneFlushed
	// DoneWithEnd writes [DONE] without a flush, so that net/http sends it
	// in the same write as the terminator when the handler returns.
	DoneWithEnd
)

// SSEServer is a net/http handler that streams SSE events at known times
// and records, per request, when and what it wrote (SSEWrite): a think
// time, then Events events Interval apart (or Gaps apart). Sleeps are relative: a server
// that fell behind must not catch up in a burst, which a probe rightly
// counts as one chunk. Set the fields before serving.
type SSEServer struct {
	Think, Interval time.Duration
	Events          int
	// Gaps, when set, are the waits after each event in turn, in place of
	// Interval (Interval after the last of them).
	Gaps []time.Duration
	// HeadersFirst flushes the response head alone before the think time,
	// as inference servers do; otherwise it goes out with the first event.
	HeadersFirst bool
	Done         DoneMode
	// Event is the i-th event as written; nil: TokenEvent.
	Event func(i int) string
	// Header holds extra response headers (Content-Type is always
	// text/event-stream).
	Header http.Header
	// PlainUnlessStreamed answers a JSON body without "stream": true with
	// one JSON body and a Content-Length, which is not a stream; a body
	// that is not JSON gets 400.
	PlainUnlessStreamed bool
	// Hold, when set, keeps the handler (and the response) open after the
	// events until it is closed: a stuck model.
	Hold <-chan struct{}

	mu      sync.Mutex
	written []SSEWrite
}

// SSEWrite is what an SSEServer wrote for one request.
type SSEWrite struct {
	ID        string    // the request's "id" query parameter
	Start     time.Time // handler entry, after the request body was read
	StartMono uint64    // CLOCK_MONOTONIC at Start
	// With HeadersFirst: CLOCK_MONOTONIC just before and after the head's
	// flush.
	HeadBefore, HeadAfter uint64
	// Per event: when its flush returned, CLOCK_MONOTONIC just before and
	// just after its flush (the kernel's write time must fall inside: an
	// exact check that scheduling noise cannot blur) and the bytes its
	// chunk put on the wire, chunked framing included.
	Flushed       []time.Time
	Before, After []uint64
	Sizes         []int
}

// First is when the first event's flush returned (zero if none was).
func (w SSEWrite) First() time.Time {
	if len(w.Flushed) == 0 {
		return time.Time{}
	}
	return w.Flushed[0]
}

// plainReply is the whole answer to a request that did not ask for a
// stream.
const plainReply = `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`

func (s *SSEServer) event(i int) string {
	if s.Event != nil {
		return s.Event(i)
	}
	return TokenEvent(i)
}

func (s *SSEServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.PlainUnlessStreamed {
		var req struct {
			Stream bool `json:"stream"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(plainReply)))
			io.WriteString(w, plainReply)
			return
		}
	}
	rec := SSEWrite{ID: r.URL.Query().Get("id"), Start: time.Now(), StartMono: MonotonicNow()}
	defer s.keep(&rec)
	for k, v := range s.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	if s.HeadersFirst {
		w.WriteHeader(http.StatusOK)
		rec.HeadBefore = MonotonicNow()
		fl.Flush()
		rec.HeadAfter = MonotonicNow()
	}
	time.Sleep(s.Think)
	for i := range s.Events {
		ev := s.event(i)
		if _, err := io.WriteString(w, ev); err != nil {
			return // the client is gone
		}
		rec.Before = append(rec.Before, MonotonicNow())
		fl.Flush()
		rec.After = append(rec.After, MonotonicNow())
		rec.Flushed = append(rec.Flushed, time.Now())
		rec.Sizes = append(rec.Sizes, ChunkedSize(len(ev)))
		if i < len(s.Gaps) {
			time.Sleep(s.Gaps[i])
		} else {
			time.Sleep(s.Interval)
		}
	}
	switch s.Done {
	case DoneFlushed:
		io.WriteString(w, DoneEvent)
		fl.Flush()
	case DoneWithEnd:
		io.WriteString(w, DoneEvent)
	}
	if s.Hold != nil {
		<-s.Hold
	}
}

func (s *SSEServer) keep(rec *SSEWrite) {
	s.mu.Lock()
	s.written = append(s.written, *rec)
	s.mu.Unlock()
}

// Written returns what each finished request got, in the order they
// finished.
func (s *SSEServer) Written() []SSEWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SSEWrite(nil), s.written...)
}

// ByID returns what the finished request with this id query parameter
// got.
func (s *SSEServer) ByID(id string) (SSEWrite, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.written {
		if w.ID == id {
			return w, true
		}
	}
	return SSEWrite{}, false
}

// EventBytes is what one stream's events put on the wire, chunked framing
// included (without [DONE] and the terminator).
func (s *SSEServer) EventBytes() int {
	total := 0
	for i := range s.Events {
		total += ChunkedSize(len(s.event(i)))
	}
	return total
}
