//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// Fault tests: what a hostile or unlucky host does to the numbers. Each
// starts its own collector (the built one) and checks the exact totals
// that reach the exporters. With TOKENWIRE_RESULTS set, the figures go to
// that file as a Markdown table (make reliability writes
// docs/results/reliability.md), else to the test log.

const (
	relEvents   = 20                    // events per stream
	relInterval = 15 * time.Millisecond // between events
)

// TestReliability runs the fault tests; each subtest is independent.
func TestReliability(t *testing.T) {
	dir := t.TempDir()
	var f figures
	t.Run("flood", func(t *testing.T) { testFlood(t, dir, &f) })
	t.Run("record loss", func(t *testing.T) { testRecordLoss(t, dir, &f) })
	t.Run("address reuse", func(t *testing.T) { testAddressReuse(t, dir, &f) })
	t.Run("kill -9", func(t *testing.T) { testKill(t, dir, &f) })
	f.write(t)
}

const (
	floodConns   = 100_000
	floodStreams = 40
)

// testFlood: a flood of one-byte connections on one watched port does not
// touch the streams of another: every stream counted once, chunk totals
// exact.
func testFlood(t *testing.T, dir string, f *figures) {
	srv := streamServer(t)
	flood, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { flood.Close() })
	floodPort := flood.Addr().(*net.TCPAddr).Port
	go func() { // read each connection's byte, then close it
		for {
			c, err := flood.Accept()
			if err != nil {
				return
			}
			go func() {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.Read(make([]byte, 1))
				c.Close()
			}()
		}
	}()
	c := startCollector(t, dir, "flood", fmt.Sprintf(`collection_interval: 1s
handshake:
  enabled: false
streams:
  ports: [%d, %d]
  max_sockets: 1024
  flush_interval: 500ms`, srv.Port, floodPort))
	slabBefore, rssBefore := slab(), rss(c.proc.Pid())

	var sent, failed atomic.Int64
	var peakSlab, peakRSS float64
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		floodConnections(floodPort, floodConns, 2*time.Minute, &sent, &failed)
	}()
	go func() { // memory while the flood runs
		for {
			select {
			case <-floodDone:
				return
			case <-time.After(200 * time.Millisecond):
				peakSlab, peakRSS = max(peakSlab, slab()), max(peakRSS, rss(c.proc.Pid()))
			}
		}
	}()
	clients := runStreams(t, srv.URL, 0, floodStreams, 10)
	<-floodDone
	// A busy machine's listen queue drops a few connection attempts; the
	// flood still has to be a flood.
	if sent.Load() < floodConns {
		t.Fatalf("%d of %d flood connections made (%d failed) in time", sent.Load(), floodConns, failed.Load())
	}
	spansOnPort(t, c, srv.Port, floodStreams, clients)
	var m series
	waitFor(t, 30*time.Second, func() error {
		m, err = scrape(c.metricsURL)
		if err != nil {
			return err
		}
		if got := m.sum("tokenwire_stream_chunks_total", fmt.Sprintf(`server_port="%d"`, srv.Port)); got != floodStreams*relEvents {
			return fmt.Errorf("chunks %v, want %d", got, floodStreams*relEvents)
		}
		if got := m.sum("gen_ai_server_time_to_first_token_seconds_count", fmt.Sprintf(`server_port="%d"`, srv.Port)); got != floodStreams {
			return fmt.Errorf("TTFT count %v, want %d", got, floodStreams)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // let the flood's sockets close
	self, err := scrape(c.selfURL)
	if err != nil {
		t.Fatal(err)
	}
	f.add(t, "flood: connections made (one byte each), failed to connect / streams on another port",
		fmt.Sprintf("%d, %d / %d", sent.Load(), failed.Load(), floodStreams))
	f.add(t, "flood: streams counted, chunks counted (want)", fmt.Sprintf("%d, %d (%d, %d)",
		int(m.sum("gen_ai_server_time_to_first_token_seconds_count", fmt.Sprintf(`server_port="%d"`, srv.Port))),
		int(m.sum("tokenwire_stream_chunks_total", fmt.Sprintf(`server_port="%d"`, srv.Port))), floodStreams, floodStreams*relEvents))
	f.add(t, "flood: connections untracked (no room, stale)", fmt.Sprintf("%v, %v",
		self.sum("otelcol_receiver_tokenwire_connections_untracked", `reason="no_room"`),
		self.sum("otelcol_receiver_tokenwire_connections_untracked", `reason="stale"`)))
	f.add(t, "flood: kernel slab MiB before / peak / after", fmt.Sprintf("%.1f / %.1f / %.1f", slabBefore, peakSlab, slab()))
	f.add(t, "flood: collector RSS MiB before / peak / after", fmt.Sprintf("%.1f / %.1f / %.1f", rssBefore, peakRSS, rss(c.proc.Pid())))
	f.add(t, "flood: tracked connections after", fmt.Sprintf("%v", self.sum("otelcol_receiver_tokenwire_map_entries", `capability="stream"`)))
}

// floodConnections makes n connections to port from many loopback source
// addresses (so ephemeral ports do not run out), sends one byte on each and
// closes it, 32 at a time, within limit; it gives up after n/100 failed
// attempts beyond n.
func floodConnections(port, n int, limit time.Duration, sent, failed *atomic.Int64) {
	deadline := time.Now().Add(limit)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+w))}}
			for sent.Load() < int64(n) && next.Add(1) <= int64(n+n/100) && time.Now().Before(deadline) {
				c, err := d.Dial("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					failed.Add(1)
					continue
				}
				c.Write([]byte{'x'})
				c.Close()
				sent.Add(1)
			}
		})
	}
	wg.Wait()
}

// waitFor polls check until it succeeds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// monotonic scrapes url every interval while work runs and fails the test
// when any series of the metrics named goes back.
func monotonic(t *testing.T, url string, names []string, work func()) (scrapes int) {
	t.Helper()
	done := make(chan struct{})
	var last series
	var back []string
	go func() {
		defer close(done)
		work()
	}()
	check := func() {
		s, err := scrape(url)
		if err != nil {
			return
		}
		scrapes++
		for k, v := range s {
			for _, n := range names {
				if strings.HasPrefix(k, n) {
					if prev, ok := last[k]; ok && v < prev {
						back = append(back, fmt.Sprintf("%s: %v -> %v", k, prev, v))
					}
				}
			}
		}
		last = s
	}
	for {
		select {
		case <-done:
			check()
			if len(back) > 0 {
				t.Errorf("counters went back: %v", back)
			}
			return scrapes
		case <-time.After(200 * time.Millisecond):
			check()
		}
	}
}

var cumulative = []string{"tokenwire_stream_chunks_total", "tokenwire_stream_bytes_total",
	"gen_ai_server_time_to_first_token_seconds", "gen_ai_server_request_duration_seconds", "tokenwire_stream_chunk_interval_seconds"}

// tinyRing is the receiver's configuration for streams on port with a
// 4 KiB ring buffer: too small for the load, so records are lost.
func tinyRing(port int) string {
	return fmt.Sprintf(`collection_interval: 200ms
ring_buffer_size: 4096
handshake:
  enabled: false
streams:
  ports: [%d]
  flush_interval: 100ms`, port)
}

// testRecordLoss: a ring buffer too small for the load loses records; every
// cumulative counter stays monotonic, the loss is reported, and no span
// carries another stream's attributes.
func testRecordLoss(t *testing.T, dir string, f *figures) {
	srv := streamServer(t)
	c := startCollector(t, dir, "loss", tinyRing(srv.Port))
	const n = 400
	var clients map[int]int
	scrapes := monotonic(t, c.metricsURL, cumulative, func() { clients = runStreams(t, srv.URL, 0, n, 100) })
	time.Sleep(2 * time.Second)
	self, err := scrape(c.selfURL)
	if err != nil {
		t.Fatal(err)
	}
	lost := self.sum("otelcol_receiver_tokenwire_records_lost", `capability="stream"`)
	if lost == 0 {
		t.Fatalf("no record lost with a 4 KiB ring: the test proves nothing")
	}
	spans, _ := readSpans(c.spans)
	m, _ := scrape(c.metricsURL)
	got := 0
	for _, s := range spans {
		if attrInt(s.Span.Attributes(), "server.port") == int64(srv.Port) {
			got++
		}
	}
	bare := spansOnPort(t, c, srv.Port, got, clients)
	chunks := m.sum("tokenwire_stream_chunks_total")
	if chunks > n*relEvents {
		t.Errorf("%v chunks counted, more than the %d written", chunks, n*relEvents)
	}
	f.add(t, "record loss (4 KiB ring): streams / records lost / spans (without request details) / chunks counted of written",
		fmt.Sprintf("%d / %v / %d (%d) / %v of %d", n, lost, got, bare, chunks, n*relEvents))
	f.add(t, "record loss: scrapes during the load, counters that went back", fmt.Sprintf("%d, 0", scrapes))
}

// testAddressReuse: short connections closed and reopened in storms, with
// END records lost to a tiny ring, reuse socket addresses; no stream joins
// another.
func testAddressReuse(t *testing.T, dir string, f *figures) {
	srv := teststack.ServeHTTP(t, &teststack.SSEServer{Think: time.Millisecond, Interval: time.Millisecond,
		Events: 3, HeadersFirst: true})
	c := startCollector(t, dir, "reuse", tinyRing(srv.Port))
	const n = 3000
	var clients map[int]int
	monotonic(t, c.metricsURL, cumulative, func() { clients = runStreams(t, srv.URL, 0, n, 64) })
	time.Sleep(2 * time.Second)
	self, _ := scrape(c.selfURL)
	m, _ := scrape(c.metricsURL)
	spans, _ := readSpans(c.spans)
	merged := 0
	for _, s := range spans {
		if attrInt(s.Span.Attributes(), "tokenwire.stream.chunks") > 3 {
			merged++
		}
	}
	if merged > 0 {
		t.Errorf("%d spans with more chunks than one stream wrote", merged)
	}
	spansOnPort(t, c, srv.Port, len(spans), clients)
	chunks := m.sum("tokenwire_stream_chunks_total")
	if chunks > n*3 {
		t.Errorf("%v chunks counted, more than the %d written", chunks, n*3)
	}
	f.add(t, "address reuse: streams on fresh connections / records lost / spans / merged", fmt.Sprintf("%d / %v / %d / %d",
		n, self.sum("otelcol_receiver_tokenwire_records_lost", `capability="stream"`), len(spans), merged))
}
