package xdp

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// reloadLog records what every reload the watcher attempted left in the
// kernel tables, read back from the kernel inside OnReload.
type reloadLog struct {
	mu     sync.Mutex
	events []reloadEvent
	notify chan struct{}
}

type reloadEvent struct {
	err    error
	tables []netip.Prefix
}

func (l *reloadLog) snapshot() []reloadEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// watchedFilter opens a filter on a blocklist file with a watcher polling
// every interval, logging each reload. Nothing is attached: the tables are
// what the test reads.
func watchedFilter(t *testing.T, initial string, interval time.Duration, cfg Config) (*Filter, string, *reloadLog) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "blocklist.txt")
	writeAtomic(t, path, initial)
	log := &reloadLog{notify: make(chan struct{}, 1000)}
	var f *Filter
	cfg.BlocklistFile, cfg.WatchInterval = path, interval
	cfg.OnReload = func(err error) {
		ev := reloadEvent{err: err, tables: blocklistInKernel(t, f)}
		log.mu.Lock()
		log.events = append(log.events, ev)
		log.mu.Unlock()
		log.notify <- struct{}{}
	}
	f, _ = loadInstanceCfg(t, cfg)
	if err := f.loadFile(); err != nil {
		t.Fatal(err)
	}
	f.startWatch()
	return f, path, log
}

// bigList is a blocklist file of n lines, both families, with comments,
// and the prefixes it holds as the kernel tables hold them.
func bigList(t *testing.T, n int, marker string) (string, []netip.Prefix) {
	var b strings.Builder
	var entries []string
	b.WriteString("# generated blocklist\n")
	for i := range n {
		var e string
		if i%3 == 2 {
			e = fmt.Sprintf("2001:db8:%x::/48", 0x100+i)
		} else {
			e = fmt.Sprintf("198.%d.%d.0/24", 18+i/256%2, i%256)
		}
		entries = append(entries, e)
		fmt.Fprintf(&b, "%s # entry %d\n", e, i)
	}
	if marker != "" {
		b.WriteString(marker + "\n")
	}
	return b.String(), mustParseAll(t, entries...)
}

// writeSlowly truncates path and writes content in chunks of chunk bytes,
// sleeping gap after each, then pause once after half of the content, as
// `cat slow-source > file` does. Chunk boundaries fall inside lines. It
// stops early when ctx ends, and returns the longest time between two
// writes it saw, which tells whether it really kept writing.
func writeSlowly(ctx context.Context, path, content string, chunk int, gap, pause time.Duration) (time.Duration, error) {
	fd, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	var longest time.Duration
	last := time.Now()
	paused := false
	for off := 0; off < len(content); off += chunk {
		if ctx.Err() != nil {
			return longest, ctx.Err()
		}
		if _, err := fd.WriteString(content[off:min(off+chunk, len(content))]); err != nil {
			return longest, err
		}
		now := time.Now()
		if d := now.Sub(last); d > longest && !(paused && d >= pause) {
			longest = d
		}
		last = now
		time.Sleep(gap)
		if !paused && pause > 0 && off >= len(content)/2 {
			paused = true
			time.Sleep(pause)
		}
	}
	return longest, nil
}

// waitReloads waits (bounded) until the log holds n events.
func waitReloads(t *testing.T, log *reloadLog, n int, within time.Duration) []reloadEvent {
	t.Helper()
	deadline := time.After(within)
	for {
		if ev := log.snapshot(); len(ev) >= n {
			return ev
		}
		select {
		case <-log.notify:
		case <-deadline:
			t.Fatalf("%d reloads after %v, want %d: %+v", len(log.snapshot()), within, n, log.snapshot())
		}
	}
}

// TestWatcherAppliesOnlyCompleteFiles writes a 600-line blocklist slowly
// (truncate, then 48-byte chunks about a millisecond apart, chunks cut
// lines in the middle) while the watcher polls every 100 ms: the watcher
// must apply the file once, when it is whole, and never anything in
// between: every reload is recorded with what the kernel tables held
// right after it.
func TestWatcherAppliesOnlyCompleteFiles(t *testing.T) {
	const interval = 100 * time.Millisecond
	content, want := bigList(t, 600, "")
	for attempt := 1; ; attempt++ {
		f, path, log := watchedFilter(t, "192.0.2.0/24\n", interval, Config{})
		initial := mustParseAll(t, "192.0.2.0/24")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		longest, err := writeSlowly(ctx, path, content, 48, time.Millisecond, 0)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if longest >= interval/2 && attempt < 3 {
			// The machine stalled the writer for as long as the file must
			// stay unchanged: this run cannot tell a pause from the end.
			t.Logf("attempt %d: the writer stalled for %v; again", attempt, longest)
			f.Close()
			continue
		}
		waitReloads(t, log, 1, 10*time.Second)
		time.Sleep(3 * interval) // nothing else may come
		events := log.snapshot()
		for i, ev := range events {
			if ev.err != nil {
				t.Errorf("reload %d failed: %v", i, ev.err)
			}
			if !slices.Equal(ev.tables, want) && !slices.Equal(ev.tables, initial) {
				t.Errorf("reload %d left %d prefixes in the kernel: an intermediate version of the file", i, len(ev.tables))
			}
		}
		st := f.Stats()
		if len(events) != 1 || st.Reloads != 1 || st.ReloadErrors != 0 {
			t.Errorf("%d reloads (Stats %+v), want exactly 1", len(events), st)
		}
		if got := blocklistInKernel(t, f); !slices.Equal(got, want) {
			t.Errorf("the kernel tables hold %d prefixes, want the file's %d", len(got), len(want))
		}
		t.Logf("%d bytes written in 48-byte chunks, longest gap %v: %d reload(s)", len(content), longest, len(events))
		return
	}
}

// TestWatcherEndMarkerCoversPauses: a writer that pauses for several
// intervals half-way defeats "unchanged for one interval"; with an end
// marker the paused half is refused as incomplete (counted), and only the
// whole file is applied.
func TestWatcherEndMarkerCoversPauses(t *testing.T) {
	const interval = 50 * time.Millisecond
	content, want := bigList(t, 300, "# end")
	f, path, log := watchedFilter(t, "192.0.2.0/24\n# end\n", interval, Config{EndMarker: "# end"})
	initial := mustParseAll(t, "192.0.2.0/24")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := writeSlowly(ctx, path, content, 64, time.Millisecond, 6*interval); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.Stats().Reloads == 0 && time.Now().Before(deadline) {
		time.Sleep(interval)
	}
	time.Sleep(3 * interval)
	events := log.snapshot()
	incomplete := 0
	for i, ev := range events {
		switch {
		case ev.err == nil && !slices.Equal(ev.tables, want):
			t.Errorf("reload %d applied %d prefixes, not the whole file", i, len(ev.tables))
		case ev.err != nil && FailureOf(ev.err) != FailureIncomplete:
			t.Errorf("reload %d: %v", i, ev.err)
		case ev.err != nil:
			incomplete++
			if !slices.Equal(ev.tables, initial) {
				t.Errorf("refused reload %d changed the kernel tables", i)
			}
		}
	}
	st := f.Stats()
	if st.Reloads != 1 || incomplete < 1 || st.ReloadErrorsByReason[FailureIncomplete] != uint64(incomplete) {
		t.Errorf("Stats %+v, %d incomplete refusals seen; want 1 reload and at least one refusal during the pause", st, incomplete)
	}
	if got := blocklistInKernel(t, f); !slices.Equal(got, want) {
		t.Errorf("the kernel tables hold %d prefixes, want %d", len(got), len(want))
	}
	t.Logf("%d reload attempts: %d refused as incomplete while the writer paused, then the whole file", len(events), incomplete)
}

// TestWatcherOtherWriters: a replacement by rename is applied once; a
// touch (new times, same bytes) is no reload; a deleted file is one
// counted failure, not one per poll, and the old list stays until the
// file is back.
func TestWatcherOtherWriters(t *testing.T) {
	const interval = 20 * time.Millisecond
	f, path, log := watchedFilter(t, "192.0.2.0/24\n", interval, Config{})
	writeAtomic(t, path, "198.51.100.0/24\n")
	ev := waitReloads(t, log, 1, 5*time.Second)
	if ev[0].err != nil || !slices.Equal(ev[0].tables, mustParseAll(t, "198.51.100.0/24")) {
		t.Fatalf("after rename: %+v", ev[0])
	}
	now := time.Now().Add(time.Second)
	if err := os.Chtimes(path, now, now); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * interval)
	if n := len(log.snapshot()); n != 1 {
		t.Errorf("touch: %d reloads, want none", n-1)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	ev = waitReloads(t, log, 2, 5*time.Second)
	if FailureOf(ev[1].err) != FailureRead || !slices.Equal(ev[1].tables, mustParseAll(t, "198.51.100.0/24")) {
		t.Errorf("deleted: %+v", ev[1])
	}
	time.Sleep(5 * interval)
	writeAtomic(t, path, "203.0.113.0/24\n")
	ev = waitReloads(t, log, 3, 5*time.Second)
	if ev[2].err != nil || !slices.Equal(ev[2].tables, mustParseAll(t, "203.0.113.0/24")) {
		t.Errorf("back: %+v", ev[2])
	}
	if st := f.Stats(); st.Reloads != 2 || st.ReloadErrors != 1 || st.ReloadErrorsByReason[FailureRead] != 1 {
		t.Errorf("Stats() = %+v", st)
	}
}
