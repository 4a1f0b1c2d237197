package main

// The Python variants' load generator: clients that send chat completions
// the way openai-python does (teststack.SDKClient, one keep-alive
// connection per client) to teststack's uvicorn + starlette server. Each
// request names a model of its own, so that the server's report of that
// request (the CLOCK_MONOTONIC time it handed each event over) can be
// joined with the client's arrival times: chunk latency = arrival - hand-over.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// pyStream is one request as the client saw it.
type pyStream struct {
	Model    string   `json:"model"`
	SentMono uint64   `json:"sent"`
	Arrivals []uint64 `json:"arrivals"` // CLOCK_MONOTONIC, per event
}

type pyLoadOut struct {
	Streams    []pyStream `json:"streams"`
	Errors     int        `json:"errors"`
	FirstError string     `json:"first_error,omitempty"`
}

func runPyLoad(args []string) error {
	a, err := parseLoad("pyload", args, loadArgs{addr: "127.0.0.1:18001", streams: 200, chunks: 60, interval: 50 * time.Millisecond}, 4096)
	if err != nil {
		return err
	}
	to := a.to
	// Go's monotonic clock is CLOCK_MONOTONIC: one pair of readings maps
	// every time.Time of this process onto it.
	t0, m0 := time.Now(), teststack.MonotonicNow()
	mono := func(t time.Time) uint64 { return m0 + uint64(t.Sub(t0)) }
	var mu sync.Mutex
	var res pyLoadOut
	var wg sync.WaitGroup
	stagger := min(time.Duration(a.chunks)*a.interval, time.Until(a.statsFrom))
	for w := range a.streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.Int64N(int64(max(stagger, time.Millisecond)))))
			c := &teststack.SDKClient{SDK: teststack.SDKPython, Addr: a.addr, Timeout: time.Duration(a.chunks)*a.interval*10 + 30*time.Second}
			defer c.Close()
			for k := 0; time.Now().Before(to); k++ {
				model := fmt.Sprintf("w%d-%d", w, k)
				r, err := c.Chat(teststack.ChatRequest{Model: model, Stream: true})
				if err == nil && !r.Done {
					err = fmt.Errorf("stream without [DONE] after %d events", r.Events)
				}
				mu.Lock()
				if err != nil {
					res.Errors++
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
				} else {
					s := pyStream{Model: model, SentMono: mono(r.Sent)}
					for _, a := range r.Arrivals {
						s.Arrivals = append(s.Arrivals, mono(r.Sent.Add(a)))
					}
					res.Streams = append(res.Streams, s)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(a.out, b, 0o644)
}

// pyLatency joins the clients' arrivals with the server's reports (by
// model) into the same result the Go load generator writes: only events
// that arrived inside [from, to) count, and those inside [statsFrom, from)
// are counted apart.
func pyLatency(raw []byte, srv *teststack.Proc, statsFrom, from, to time.Time) (loadResult, error) {
	var lo pyLoadOut
	if err := json.Unmarshal(raw, &lo); err != nil {
		return loadResult{}, err
	}
	// The window on CLOCK_MONOTONIC.
	now, nowMono := time.Now(), teststack.MonotonicNow()
	statsM := nowMono - uint64(now.Sub(statsFrom))
	fromM := nowMono - uint64(now.Sub(from))
	toM := nowMono - uint64(now.Sub(to))
	// The server reports a request when its response is over: wait for
	// every stream the clients completed.
	isReport := func(l string) bool { return strings.HasPrefix(l, "{") && !strings.Contains(l, `"ready":`) }
	lines, err := srv.WaitLines(30*time.Second, len(lo.Streams), isReport)
	if err != nil {
		return loadResult{}, fmt.Errorf("server reports: %w", err)
	}
	sent := map[string][]uint64{}
	for _, l := range lines {
		var r teststack.Report
		if json.Unmarshal([]byte(l), &r) == nil {
			sent[r.Model] = r.EventNS
		}
	}
	bounds := histBounds()
	res := loadResult{Streams: len(lo.Streams), Errors: lo.Errors, FirstError: lo.FirstError, WindowSec: to.Sub(from).Seconds(),
		Hist: make([]uint64, len(bounds)+1)}
	var lat, ttft []float64
	for _, s := range lo.Streams {
		ev, ok := sent[s.Model]
		if !ok {
			return res, fmt.Errorf("no server report for stream %s", s.Model)
		}
		res.Completed++
		for i, a := range s.Arrivals {
			if a >= statsM && a < fromM && i < len(ev) {
				res.StatsChunks++
			}
			if a < fromM || a >= toM || i >= len(ev) {
				continue
			}
			if i == 0 {
				ttft = append(ttft, float64(a-s.SentMono)/1e6)
			}
			us := float64(int64(a-ev[i])) / 1e3
			lat = append(lat, us/1e3)
			res.Hist[histIndex(bounds, us)]++
		}
	}
	res.Chunks = len(lat)
	res.LatencyMs = []float64{benchutil.Percentile(lat, 0.5), benchutil.Percentile(lat, 0.9), benchutil.Percentile(lat, 0.99),
		benchutil.Percentile(lat, 0.999), benchutil.Percentile(lat, 1)}
	res.TTFTMs = []float64{benchutil.Percentile(ttft, 0.5), benchutil.Percentile(ttft, 0.99)}
	return res, nil
}
