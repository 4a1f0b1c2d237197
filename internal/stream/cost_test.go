package stream

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// costConfig, when set, changes TestServerPathCost's configuration
// (client_test.go: a client port configured).
var costConfig func(*Config)

// TestServerPathCost prints what the hook programs cost per run while a
// server streams to a client on loopback (kernel bpf stats), so that a
// change to the probe can be compared with the one before it. Opt-in
// (TOKENWIRE_COST=1): it takes seconds and asserts nothing.
func TestServerPathCost(t *testing.T) {
	if os.Getenv("TOKENWIRE_COST") == "" {
		t.Skip("TOKENWIRE_COST=1 runs it")
	}
	bpftest.Require(t)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()
	srv := teststack.ServeHTTP(t, &teststack.SSEServer{Interval: time.Millisecond, Events: 200,
		Done: teststack.DoneWithEnd, Event: func(i int) string { return fmt.Sprintf("data: {\"n\":%d}\n\n", i) }})
	cfg := testConfig(uint16(srv.Port))
	cfg.ChunkRecords = false
	if costConfig != nil {
		costConfig(&cfg)
	}
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	record(t, tr)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	for range 100 {
		resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var lines []string
	for name, progs := range tr.Programs() {
		for _, p := range progs {
			info, err := p.Info()
			if err != nil {
				t.Fatal(err)
			}
			s, err := p.Stats()
			if err != nil {
				t.Fatal(err)
			}
			per := time.Duration(0)
			if s.RunCount > 0 {
				per = s.Runtime / time.Duration(s.RunCount)
			}
			lines = append(lines, fmt.Sprintf("%-8s %-16s runs %8d  %v/run", name, info.Name, s.RunCount, per))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		t.Log(l)
	}
}
