// Command streams measures the stream probe's accuracy on this machine: how
// close its TTFT and chunk intervals are to what the server and the client
// measured (its kernel cost per chunk is bench/kcost's).
//
// It needs root. Traffic stays on 127.0.0.1; every loop is bounded.
//
//	go run ./bench/streams -streams 50 -chunks 50 -interval 20ms -think 50ms
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

var (
	nStreams = flag.Int("streams", 50, "concurrent streams per round")
	nChunks  = flag.Int("chunks", 50, "events per stream")
	interval = flag.Duration("interval", 20*time.Millisecond, "time between events")
	think    = flag.Duration("think", 50*time.Millisecond, "time before the first event")
	outDir   = flag.String("outdir", "bench/results", "where accuracy.csv goes")
)

// newServer is an SSE server that records, per stream (by its id query
// parameter), when it started answering and when each event's flush
// returned.
func newServer() *teststack.SSEServer {
	return &teststack.SSEServer{Think: *think, Interval: *interval, Events: *nChunks,
		Event: func(i int) string { return fmt.Sprintf("data: {\"token\":%d}\n\n", i) }}
}

// client runs one stream and returns when each event arrived, relative to
// the request being sent.
func client(addr, id string) (sent time.Time, arrivals []time.Time, err error) {
	conn, err := net.Dial("tcp4", addr)
	if err != nil {
		return sent, nil, err
	}
	defer conn.Close()
	sent = time.Now()
	fmt.Fprintf(conn, "GET /stream?id=%s HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n", id)
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return sent, arrivals, nil
			}
			return sent, arrivals, err
		}
		if strings.Contains(line, "data: ") {
			arrivals = append(arrivals, time.Now())
		}
	}
}

func openTracer(port uint16, chunkRecords bool) (*stream.Tracer, error) {
	return stream.Open(stream.Config{
		Ports: []uint16{port}, MaxSockets: 16384, StateSlots: stream.DefaultStateSlots, RingBufferBytes: 8 << 20,
		HookOrder: hook.DefaultOrder, Coalesce: 500 * time.Microsecond,
		FlushInterval: time.Second, ChunkRecords: chunkRecords, GapBounds: stream.DefaultGapBounds,
	})
}

func main() { benchutil.Main("streams bench", run, nil) }

func run() error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	res, err := benchutil.OpenResults(*outDir, "accuracy")
	if err != nil {
		return err
	}
	srv := newServer()
	hs, err := teststack.StartHTTP("", srv)
	if err != nil {
		return err
	}
	defer hs.Close()
	rows, err := accuracy(hs.Addr, uint16(hs.Port), srv)
	if err != nil {
		return err
	}
	if err := res.WriteCSV("accuracy.csv", []string{"measure", "p50_ms", "p99_ms", "max_ms", "n", "streams_matched", "streams"}, rows); err != nil {
		return err
	}
	return res.WriteMeta(map[string]string{"streams": fmt.Sprint(*nStreams), "chunks": fmt.Sprint(*nChunks),
		"interval": interval.String(), "think": think.String()})
}

// accuracy runs one round with per-chunk records and compares each
// stream's kernel timings with the server's and the client's.
func accuracy(addr string, port uint16, srv *teststack.SSEServer) ([][]string, error) {
	tr, err := openTracer(port, true)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	type kstream struct {
		reqTS, firstTS uint64
		chunks         []uint64
		reqID          string
		headerLen      int
	}
	var mu sync.Mutex
	streams := map[stream.ID]*kstream{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var rec stream.Record
		for tr.Read(&rec) == nil {
			mu.Lock()
			k := streams[rec.ID]
			if k == nil {
				k = &kstream{}
				streams[rec.ID] = k
			}
			switch rec.Kind {
			case stream.KindRequest:
				if _, after, ok := strings.Cut(string(rec.Data), "id="); ok {
					k.reqID, _, _ = strings.Cut(after, " ")
				}
			case stream.KindResponse:
				k.headerLen = strings.Index(string(rec.Data), "\r\n\r\n") + 4
			case stream.KindProgress:
				if k.firstTS == 0 && rec.Stats.FirstChunkTS != 0 {
					// As the receiver does: a head write that carried the
					// first event is the first chunk.
					k.reqTS, k.firstTS = rec.Stats.RequestTS, rec.Stats.FirstChunkTS
					if rec.Stats.HeadBody(k.headerLen) > 0 {
						k.firstTS = rec.Stats.HeadersTS
						k.chunks = append(k.chunks, rec.Stats.HeadersTS)
					}
					k.chunks = append(k.chunks, rec.Stats.FirstChunkTS)
				}
			case stream.KindChunk:
				k.chunks = append(k.chunks, rec.Stats.LastChunkTS)
			}
			mu.Unlock()
		}
	}()

	type clientRes struct {
		sent     time.Time
		arrivals []time.Time
	}
	clients := map[string]clientRes{}
	var cmu sync.Mutex
	var wg sync.WaitGroup
	for i := range *nStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("acc-%d", i)
			sent, arr, err := client(addr, id)
			if err == nil {
				cmu.Lock()
				clients[id] = clientRes{sent, arr}
				cmu.Unlock()
			}
		}()
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	tr.Close()
	<-done

	var ttftVsServer, ttftVsClient, gapVsServer []float64
	matched := 0
	for _, k := range streams {
		st, ok := srv.ByID(k.reqID)
		c, cok := clients[k.reqID]
		if k.reqID == "" || !ok || !cok || k.firstTS == 0 {
			continue
		}
		matched++
		kttft := time.Duration(k.firstTS - k.reqTS)
		ttftVsServer = append(ttftVsServer, float64((kttft-st.First().Sub(st.Start)).Abs())/1e6)
		if len(c.arrivals) > 0 {
			ttftVsClient = append(ttftVsClient, float64((kttft-c.arrivals[0].Sub(c.sent)).Abs())/1e6)
		}
		for i := 1; i < len(k.chunks) && i < len(st.Flushed); i++ {
			kg := time.Duration(k.chunks[i] - k.chunks[i-1])
			sg := st.Flushed[i].Sub(st.Flushed[i-1])
			gapVsServer = append(gapVsServer, float64((kg-sg).Abs())/1e6)
		}
	}
	var rows [][]string
	for _, row := range []struct {
		name string
		v    []float64
	}{
		{"ttft_vs_server", ttftVsServer},
		{"ttft_vs_client", ttftVsClient},
		{"interval_vs_server", gapVsServer},
	} {
		rows = append(rows, []string{row.name, fmt.Sprintf("%.3f", benchutil.Percentile(row.v, 0.5)), fmt.Sprintf("%.3f", benchutil.Percentile(row.v, 0.99)),
			fmt.Sprintf("%.3f", benchutil.Percentile(row.v, 1)), fmt.Sprint(len(row.v)), fmt.Sprint(matched), fmt.Sprint(*nStreams)})
	}
	return rows, nil
}
