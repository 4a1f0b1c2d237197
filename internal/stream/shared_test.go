package stream

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// sharedTracer is a tracer that the tests which only read records share
// (trace, traceTails). Loading the probe is most of such a test's time in
// an emulated guest (the verifier walks the write program's hundreds of
// thousands of instructions), so the package loads it once for all of
// them (once per write-tail source: two loads). Its port list is in
// tw_st_ports: each test watches its own servers' ports while it runs,
// and the records of their connections go to its recorder.
type sharedTracer struct {
	tailByUser bool

	once sync.Once
	tr   *Tracer
	err  error
	done chan struct{}

	mu sync.Mutex
	// byPort is the recorder of the test that watches each port.
	byPort map[uint16]*recorder
	// owner is the recorder of each connection, the one its first record
	// went to, or nil once that test ended: its later records go there
	// too, though another test may watch its port by then.
	owner map[connKey]*recorder
	// readErr is the error that stopped the reader, other than ErrClosed.
	readErr error
}

// connKey is a connection's part of a stream's ID.
type connKey struct{ sock, gen uint64 }

// sharedTracers are testConfig's tracer, and the one that reads every
// write's last bytes from the writer's memory (tailByUser).
var sharedTracers = [2]*sharedTracer{{}, {tailByUser: true}}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range sharedTracers {
		if s.tr != nil {
			s.tr.Close()
			<-s.done
		}
	}
	os.Exit(code)
}

// trace watches ports on testConfig's shared tracer until the test ends,
// and records what the connections to them make.
func trace(t *testing.T, ports ...uint16) *recorder {
	t.Helper()
	return sharedTracers[0].watch(t, ports)
}

// traceTails is trace on the shared tracer that reads every write's last
// bytes from the writer's memory if tailByUser, as kernels before 6.2 do.
func traceTails(t *testing.T, tailByUser bool, ports ...uint16) *recorder {
	t.Helper()
	return sharedTracers[boolByte(tailByUser)].watch(t, ports)
}

func (s *sharedTracer) watch(t *testing.T, ports []uint16) *recorder {
	t.Helper()
	s.once.Do(s.open)
	if s.err != nil {
		t.Fatal(s.err)
	}
	if err := s.readError(); err != nil {
		t.Fatalf("the shared tracer's reader stopped: %v", err)
	}
	r := &recorder{tr: s.tr, readErr: s.readError, since: teststack.MonotonicNow()}
	_, r.lateOthers = s.tr.LateRecords()
	s.mu.Lock()
	for _, p := range ports {
		if s.byPort[p] != nil {
			s.mu.Unlock()
			t.Fatalf("port %d is another test's", p)
		}
	}
	for _, p := range ports {
		s.byPort[p] = r
	}
	s.mu.Unlock()
	t.Cleanup(func() {
		for _, p := range ports {
			if err := s.watchPort(p, false); err != nil {
				t.Error(err)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range ports {
			delete(s.byPort, p)
		}
		for key, owner := range s.owner {
			if owner == r {
				s.owner[key] = nil
			}
		}
	})
	for _, p := range ports {
		if err := s.watchPort(p, true); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func (s *sharedTracer) open() {
	cfg := testConfig()
	cfg.portsInMap, cfg.tailByUser = true, s.tailByUser
	if s.tr, s.err = Open(cfg); s.err != nil {
		return
	}
	s.byPort = map[uint16]*recorder{}
	s.owner = map[connKey]*recorder{}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		var rec Record
		for {
			if err := s.tr.Read(&rec); err != nil {
				if !errors.Is(err, ErrClosed) {
					s.mu.Lock()
					s.readErr = err
					s.mu.Unlock()
				}
				return
			}
			if r := s.route(&rec); r != nil {
				r.add(&rec)
			}
		}
	}()
}

// route finds the recorder of rec's connection: its owner, or for a
// connection not seen yet the test that watches its port, if the record
// is of a stream after the test began to watch (a payload record made
// since; a PROGRESS or END of a request read since, or without one, of an
// end since): a test's server may have the port of an earlier test's,
// whose last records can still be on their way. A CHUNK carries no
// endpoints: it goes where the records of its connection went, and
// nowhere before one of them.
func (s *sharedTracer) route(rec *Record) *recorder {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := connKey{rec.ID.Sock, rec.ID.Gen}
	if r, ok := s.owner[key]; ok {
		return r
	}
	port, began := rec.Port, rec.TS
	switch rec.Kind {
	case KindProgress, KindEnd:
		port, began = rec.Stats.Local.Port(), cmp.Or(rec.Stats.RequestTS, rec.Stats.EndTS)
	}
	r := s.byPort[port]
	if r == nil || began < r.since {
		return nil
	}
	if rec.ID != (ID{}) {
		s.owner[key] = r
	}
	return r
}

// readError is the error that stopped the reader.
func (s *sharedTracer) readError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readErr
}

// watchPort starts (on) or stops the probe's readiness, read and write
// programs on port's connections, open ones included; the state program
// still ends and forgets a connection of an unwatched port at its close.
func (s *sharedTracer) watchPort(port uint16, on bool) error {
	if err := s.tr.maps.TwStPorts.Put(uint32(port), boolByte(on)); err != nil {
		return fmt.Errorf("watching port %d (%v): %w", port, on, err)
	}
	return nil
}
