package streamagg

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
)

func simple(seq uint32, path, model string) streamaggtest.Stream {
	req := "POST " + path + " HTTP/1.1\r\n\r\n"
	if model != "" {
		req += `{"model":"` + model + `"}`
	}
	return streamaggtest.Stream{Seq: seq, Request: req, Head: sseHead, HeadBytes: uint32(len(sseHead)),
		HeadAt: 1, ChunkAt: []uint64{10, 20}, ChunkBytes: 5}
}

// Metrics carry the route, spans the raw path and the route.
func TestRoutesOnMetricsRawPathsOnSpans(t *testing.T) {
	cfg := testConfig()
	cfg.Routes = []string{"/v1beta/models/{model}:streamGenerateContent"}
	h := newHarness(cfg)
	h.run(simple(1, "/v1/threads/4242/runs", ""))
	h.run(simple(2, "/v1/threads/977/runs", ""))
	h.run(simple(3, "/v1beta/models/gemini-pro:streamGenerateContent", ""))
	require.EqualValues(t, 4, h.series(t, "/v1/threads/{id}/runs", "").Chunks, "two streams, one route")
	require.EqualValues(t, 2, h.series(t, "/v1beta/models/{model}:streamGenerateContent", "gemini-pro").Chunks,
		"the route hides the model, gen_ai.request.model names it")
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 3)
	require.Equal(t, "/v1/threads/4242/runs", spans[0].Path)
	require.Equal(t, "/v1/threads/{id}/runs", spans[0].Route)
}

// Beyond MaxSeries, new attribute sets go to one overflow series per
// mode, each stream counted there and reported.
func TestSeriesCapHasAnOverflowSeries(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSeries = 2
	overflow := 0
	cfg.OnOverflow = func() { overflow++ }
	h := newHarness(cfg)
	for i, p := range []string{"/a", "/b", "/c", "/d", "/a"} {
		h.run(simple(uint32(i+1), p, ""))
	}
	require.Equal(t, 2, overflow, "/c and /d")
	over := h.series(t, OtherValue, OtherValue)
	require.EqualValues(t, 4, over.Chunks)
	require.Zero(t, over.Process.PID, "the overflow series belongs to no process")
	require.EqualValues(t, 4, h.series(t, "/a", "").Chunks)
	for _, sn := range h.a.Snapshot() {
		if sn.Key.Route == OtherValue {
			require.Equal(t, "_OTHER", sn.Key.Method, "the HTTP conventions' method beyond what is reported")
		}
	}
	// It stays however long no stream came to it: made again, its
	// cumulative totals would restart under the same start time.
	h.a.cfg.SeriesExpiry = time.Minute
	h.a.ExpireSeries(time.Now().Add(time.Hour))
	require.EqualValues(t, 4, h.series(t, OtherValue, OtherValue).Chunks)
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 5)
	for i, sp := range spans {
		require.Equal(t, h.pid, sp.Process.PID, "spans keep their process")
		p := []string{"/a", "/b", "/c", "/d", "/a"}[i]
		require.Equal(t, p, sp.Path, "spans keep their path and route beyond the cap")
		require.Equal(t, p, sp.Route)
		require.Equal(t, "POST", sp.Method, "and their method and port")
		require.Equal(t, streamaggtest.Server.Port(), sp.Port)
	}
}

// A span's route, path and models are its own values whatever the series
// caps made of the metrics' attributes.
func TestSpanValuesBeyondTheValueCaps(t *testing.T) {
	cfg := testConfig()
	cfg.MaxPaths, cfg.MaxModels = 1, 1
	h := newHarness(cfg)
	h.run(simple(1, "/v1/chat/completions", "a"))
	h.run(simple(2, "/v1/completions", "b"))
	require.EqualValues(t, 2, h.series(t, OtherValue, OtherValue).Chunks)
	spans := h.a.TakeSpans(nil)
	require.Len(t, spans, 2)
	require.Equal(t, "/v1/completions", spans[1].Path)
	require.Equal(t, "/v1/completions", spans[1].Route)
	require.Equal(t, "b", spans[1].Model)
}

// A series whose process exited goes once SeriesExpiry has passed since
// its last stream; a running process's series stays.
func TestSeriesOfExitedProcessesExpire(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	cfg := testConfig()
	cfg.SeriesExpiry = time.Minute
	h := newHarness(cfg)
	child := simple(1, "/child", "")
	child.PID = uint32(cmd.Process.Pid)
	h.run(child)
	h.run(simple(2, "/self", ""))
	later := time.Now().Add(2 * time.Minute)
	require.Zero(t, h.a.ExpireSeries(later), "both processes run")
	cmd.Process.Kill()
	cmd.Wait()
	require.Zero(t, h.a.ExpireSeries(time.Now()), "the child's series was updated less than SeriesExpiry ago")
	require.Equal(t, 1, h.a.ExpireSeries(later))
	snap := h.a.Snapshot()
	require.Len(t, snap, 1)
	require.Equal(t, "/self", snap[0].Key.Route)
	require.Equal(t, uint32(os.Getpid()), snap[0].Process.PID)
}

// Junk values cannot hold the route and model places for good: one not
// seen for SeriesExpiry gives its place to a new value.
func TestJunkValuesGiveTheirPlacesUp(t *testing.T) {
	cfg := testConfig()
	cfg.MaxPaths, cfg.SeriesExpiry = 2, 50*time.Millisecond
	h := newHarness(cfg)
	h.run(simple(1, "/junk1", ""))
	h.run(simple(2, "/junk2", ""))
	h.run(simple(3, "/real", ""))
	require.EqualValues(t, 2, h.series(t, OtherValue, "").Chunks, "no place yet")
	time.Sleep(60 * time.Millisecond)
	h.run(simple(4, "/real", ""))
	require.EqualValues(t, 2, h.series(t, "/real", "").Chunks, "a junk value's place was taken")
}

// Server addresses that came as strings (a ClientHello's server name, the
// peer's address) give their places up as the Host headers' do: one not
// seen for the expiry makes room, and one in use keeps its place.
func TestServerNamesGiveTheirPlacesUp(t *testing.T) {
	v := newValues(1, time.Minute)
	require.Equal(t, "a.example", v.getString("a.example", 0))
	require.Equal(t, OtherValue, v.getString("b.example", 30*time.Second), "no place yet")
	require.Equal(t, "a.example", v.getString("a.example", 50*time.Second))
	require.Equal(t, OtherValue, v.getString("b.example", 100*time.Second), "a.example was seen 50 s ago")
	require.Equal(t, "b.example", v.getString("b.example", 111*time.Second), "a.example's place, unseen for a minute")
}

// Totals that go back (the kernel's state for the socket started over)
// are counted afresh, never as a huge unsigned jump.
func TestTotalsGoingBackStartOver(t *testing.T) {
	h := newHarness(testConfig())
	recs := simple(1, "/x", "").Records(IntervalBounds)
	progress := recs[2]
	progress.Kind = stream.KindProgress
	progress.Stats.Chunks, progress.Stats.Bytes = 9, 90
	for _, r := range []stream.Record{recs[0], recs[1], progress, recs[2]} {
		h.a.Add(&r)
	}
	s := h.series(t, "/x", "")
	require.EqualValues(t, 9+2, s.Chunks)
	require.EqualValues(t, 90+10, s.Bytes)
}
