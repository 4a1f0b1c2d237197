package benchutil

// One `make bench` is one run: every results file it writes carries the
// run's id (a run_id column in CSV, a field in JSON), so that the report
// can refuse to put together sections of different runs.

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// RunIDEnv names the environment variable that carries the run id from
// `make bench` (bench/run.sh) to every benchmark program.
const RunIDEnv = "TW_BENCH_RUN_ID"

var (
	runOnce sync.Once
	runID   string
)

// RunID is the current run's id: $TW_BENCH_RUN_ID, or, for a program run
// on its own, a new one (NewRunID).
func RunID() string {
	runOnce.Do(func() {
		runID = os.Getenv(RunIDEnv)
		if runID == "" {
			runID = NewRunID()
		}
	})
	return runID
}

// NewRunID is the UTC time, the commit checked out and "-dirty" when the
// tree has changes outside the benchmark's own output (bench/results,
// BENCHMARKS.md): 20261130T140414Z-3cfdd1c0a1b2-dirty.
func NewRunID() string {
	id := time.Now().UTC().Format("20060102T150405Z")
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return id + "-nogit"
	}
	id += "-" + strings.TrimSpace(string(out))
	st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ".",
		":(exclude)bench/results", ":(exclude)BENCHMARKS.md").Output()
	if err != nil || len(strings.TrimSpace(string(st))) > 0 {
		id += "-dirty"
	}
	return id
}

// Meta is what a benchmark program records about itself and the host
// around its measurements: <section>.meta.json.
type Meta struct {
	RunID   string    `json:"run_id"`
	Section string    `json:"section"`
	Command []string  `json:"command"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Go      string    `json:"go"`
	// Machine, CPUs, CPUVulnerabilities and TLB describe the host as the
	// section ran (Machine, runtime.NumCPU, CPUVulnerabilities,
	// TLBIsolation): a report regenerated elsewhere still names the
	// machine that measured.
	Machine            string            `json:"machine,omitempty"`
	CPUs               int               `json:"cpus,omitempty"`
	CPUVulnerabilities []string          `json:"cpu_vulnerabilities,omitempty"`
	TLB                string            `json:"tlb,omitempty"`
	Host               HostLoad          `json:"host"`
	Params             map[string]string `json:"params,omitempty"`
}

// Results writes one program's results files into Dir, each stamped with
// the run id.
type Results struct {
	Dir, RunID, Section string
	start               time.Time
	host                *HostSampler
}

// OpenResults creates dir and starts the section's host sampler (load
// average and other processes' CPU from now until WriteMeta).
func OpenResults(dir, section string) (*Results, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Results{Dir: dir, RunID: RunID(), Section: section, start: time.Now(), host: StartHost()}, nil
}

// WriteCSV writes name (e.g. "kcost.csv") with run_id as its first column.
func (r *Results) WriteCSV(name string, header []string, rows [][]string) error {
	f, err := os.Create(filepath.Join(r.Dir, name))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(append([]string{"run_id"}, header...))
	for _, row := range rows {
		w.Write(append([]string{r.RunID}, row...))
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteJSON writes v as name, which must hold its own run_id field.
func (r *Results) WriteJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.Dir, name), append(b, '\n'), 0o644)
}

// WriteMeta ends the section: <section>.meta.json with the command line,
// the times, the machine and the host's load since OpenResults.
func (r *Results) WriteMeta(params map[string]string) error {
	m := Meta{RunID: r.RunID, Section: r.Section, Command: os.Args, Start: r.start.UTC(), End: time.Now().UTC(),
		Go: runtime.Version(), Machine: Machine(), CPUs: runtime.NumCPU(), CPUVulnerabilities: CPUVulnerabilities(),
		TLB:  TLBIsolation(),
		Host: r.host.Stop(), Params: params}
	return r.WriteJSON(r.Section+".meta.json", m)
}

// Table is a results CSV read back: rows as column -> value.
type Table struct {
	Name   string
	Header []string
	Rows   []map[string]string
}

// ReadCSV reads a results CSV and refuses it unless every row carries
// runID.
func ReadCSV(dir, name, runID string) (*Table, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(recs) == 0 || recs[0][0] != "run_id" {
		return nil, fmt.Errorf("%s: no run_id column: not written by this run's tooling", name)
	}
	t := &Table{Name: name, Header: recs[0]}
	for i, rec := range recs[1:] {
		if rec[0] != runID {
			return nil, fmt.Errorf("%s row %d is from run %s, not %s: refusing to mix runs", name, i+2, rec[0], runID)
		}
		row := map[string]string{}
		for j, h := range recs[0] {
			if j < len(rec) {
				row[h] = rec[j]
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t, nil
}

// ReadMeta reads <section>.meta.json and refuses it unless it is runID's.
func ReadMeta(dir, section, runID string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, section+".meta.json"))
	if err != nil {
		return nil, err
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s.meta.json: %w", section, err)
	}
	if m.RunID != runID {
		return nil, fmt.Errorf("%s.meta.json is from run %s, not %s: refusing to mix runs", section, m.RunID, runID)
	}
	return &m, nil
}
