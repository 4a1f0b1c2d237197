package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// gobench is `go test -bench` output of this run (bench/results/gobench.txt,
// whose first line names the run): per benchmark and unit, one value per
// -count run; and the tests that passed or failed.
type gobench struct {
	vals  map[string]map[string][]float64
	tests map[string]string // test name -> PASS/FAIL
}

var benchName = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?$`)

func readGobench(runID string) (*gobench, error) {
	f, err := os.Open(filepath.Join(*resultsDir, "gobench.txt"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	g := &gobench{vals: map[string]map[string][]float64{}, tests: map[string]string{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "run_id: "+runID {
		return nil, fmt.Errorf("gobench.txt is not from run %s (first line %q): refusing to mix runs", runID, sc.Text())
	}
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 3 && fs[0] == "---" {
			g.tests[fs[2]] = strings.TrimSuffix(fs[1], ":")
			continue
		}
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		m := benchName.FindStringSubmatch(fs[0])
		if m == nil {
			continue
		}
		if g.vals[m[1]] == nil {
			g.vals[m[1]] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fs); i += 2 {
			v, err := strconv.ParseFloat(fs[i], 64)
			if err == nil {
				g.vals[m[1]][fs[i+1]] = append(g.vals[m[1]][fs[i+1]], v)
			}
		}
	}
	return g, sc.Err()
}

func (g *gobench) get(name, unit string) spread { return spreadOf(g.vals[name][unit]) }

// goBenchAllocs reports the aggregation's allocations per record
// (TestStreamRecordsDoNotAllocate, BenchmarkStreamRecords).
func goBenchAllocs(d *doc) error {
	g, err := readGobench(d.runID)
	if err != nil {
		return err
	}
	test := g.tests["TestStreamRecordsDoNotAllocate"]
	if test == "" {
		test = "not run"
	}
	d.p("`TestStreamRecordsDoNotAllocate` (internal/streamagg: exactly 0 allocations per record on the metrics path once series exist): **%s**.\n\n", test)
	d.p("| BenchmarkStreamRecords | ns/record | allocs/record | runs |\n| --- | --- | --- | --- |\n")
	for _, c := range []string{"metrics", "spans"} {
		n := "BenchmarkStreamRecords/" + c
		d.p("| %s | %s | %s | %d |\n", c, g.get(n, "ns/record").f(1), g.get(n, "allocs/record").f(4), g.get(n, "ns/record").N)
	}
	d.p("\n")
	verdict := "**missed**"
	if test == "PASS" {
		verdict = "**met**"
	}
	d.target("0 allocations per record on the hot path (metrics path, TestStreamRecordsDoNotAllocate)",
		fmt.Sprintf("test %s; BenchmarkStreamRecords/metrics %s allocs/record", test, g.get("BenchmarkStreamRecords/metrics", "allocs/record").f(4)), verdict, "3")
	return nil
}
