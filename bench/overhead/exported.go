package main

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
)

// exported is what a collector's debug exporter reported over the
// collector's whole life (warm-up and drain included): evidence that both
// variants' collectors really exported spans and metrics, and how many.
type exported struct {
	Spans, Points int
}

// The debug exporter at verbosity basic logs one line per batch:
// `Traces {..., "resource spans": 1, "spans": 12}` and
// `Metrics {..., "metrics": 5, "data points": 20}`.
var (
	spansRe  = regexp.MustCompile(`\bTraces\b.*"spans": (\d+)`)
	pointsRe = regexp.MustCompile(`\bMetrics\b.*"data points": (\d+)`)
)

// countExported sums the debug exporter's counts in a collector log.
func countExported(logPath string) (exported, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return exported{}, err
	}
	defer f.Close()
	var x exported
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if m := spansRe.FindSubmatch(line); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			x.Spans += n
		} else if m := pointsRe.FindSubmatch(line); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			x.Points += n
		}
	}
	return x, sc.Err()
}
