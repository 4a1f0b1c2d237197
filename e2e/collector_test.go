//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// collector is a tokenwire collector the test started with a config of its
// own: metrics on a Prometheus endpoint, spans to a file, self-telemetry on
// another endpoint.
type collector struct {
	proc                *teststack.Proc
	metricsURL, selfURL string
	spans               string // the file exporter's output
}

// startCollector runs the built collector with receiver (the tokenwire
// receiver's settings, as YAML under "tokenwire:") and waits until it says
// it is ready: loading and attaching take a while, and the first streams
// would otherwise be missed.
func startCollector(t *testing.T, dir, name, receiver string) *collector {
	t.Helper()
	bin := lookBin(t, "TOKENWIRE_COLLECTOR", "../_build/tokenwire", "run make build first")
	metricsPort, selfPort := freePort(t), freePort(t)
	c := &collector{
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		selfURL:    fmt.Sprintf("http://127.0.0.1:%d/metrics", selfPort),
		spans:      filepath.Join(dir, name+"-spans.json"),
	}
	cfg := fmt.Sprintf(`receivers:
  tokenwire:
%s
exporters:
  prometheus:
    endpoint: 127.0.0.1:%d
  file:
    path: %s
    flush_interval: 100ms
service:
  pipelines:
    metrics:
      receivers: [tokenwire]
      exporters: [prometheus]
    traces:
      receivers: [tokenwire]
      exporters: [file]
`, indent(receiver, "    "), metricsPort, c.spans) + teststack.CollectorTelemetry(selfPort, "normal", "  ")
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	c.proc = startProc(t, dir, name, nil, bin, "--config", path)
	waitReady(t, c.proc, 2*time.Minute, name+" ready", func() error {
		if !c.proc.LogContains("Everything is ready") {
			return fmt.Errorf("not ready yet")
		}
		return nil
	})
	return c
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

// series is one scrape: each sample's value by its name and labels as the
// exposition format writes them (name{a="x",b="y"}).
type series map[string]float64

// scrape reads a Prometheus text endpoint.
func scrape(url string) (series, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := series{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", url, line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sum adds the samples of metric name whose labels include every one of
// labels (`key="value"` strings).
func (s series) sum(name string, labels ...string) float64 {
	var total float64
next:
	for k, v := range s {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(k, l) {
				continue next
			}
		}
		total += v
	}
	return total
}

// rss is a process's resident memory, in MiB.
func rss(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}

// slab is the kernel's slab memory (/proc/meminfo Slab), in MiB: where
// socket storage and sockets live.
func slab() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Slab:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}
