package main

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// Matrix is the whole result of a `make kernels` run, as written to
// matrix.json and rendered into matrix.md.
type Matrix struct {
	Date        string  `json:"date"` // UTC, RFC 3339
	Commit      string  `json:"commit"`
	Dirty       bool    `json:"dirty"` // the tree had uncommitted changes
	GoVersion   string  `json:"go_version"`
	QemuVersion string  `json:"qemu_version"`
	QemuCommand string  `json:"qemu_command"`
	Host        string  `json:"host"` // this machine's kernel and cores
	Jobs        int     `json:"jobs"` // guests at a time
	Cores       int     `json:"cores"`
	WallSeconds float64 `json:"wall_seconds"`
	// BusySeconds is the CPU time the whole machine was busy during the
	// run; OwnSeconds the part the guests and the native plan took. The
	// rest was other work: the build, and whatever else ran meanwhile,
	// which slows the emulated guests down.
	BusySeconds  float64  `json:"machine_busy_cpu_seconds"`
	OwnSeconds   float64  `json:"own_cpu_seconds"`
	Capabilities []string `json:"capabilities"`
	Hooks        []string `json:"hooks"`
	Rows         []Row    `json:"rows"`
	// Excluded lists the tests the guests leave out, with
	// the reason; the native row runs them.
	Excluded []Skip `json:"excluded_in_guests"`
	// HookRunSkips lists the tests left out of the forced-hook runs.
	HookRunSkips []Skip `json:"excluded_from_forced_hook_runs"`
	// HookRunOnly lists the packages whose forced-hook runs take only
	// some of their tests.
	HookRunOnly []Only `json:"forced_hook_runs_only"`
	// GuestOnly lists the packages whose runs in the guests take only
	// some of their tests.
	GuestOnly []Only `json:"guest_runs_only"`
	Cells     int    `json:"cells"`
	Failed    int    `json:"failed_cells"`
}

// Cell finds the run of capability c under hook h in row r.
func (r Row) Cell(c, h string) (RunResult, bool) {
	for _, run := range r.Runs {
		if run.Capability == c && run.Hook == h {
			return run, true
		}
	}
	return RunResult{}, false
}

// Tally counts the cells and the failed ones; a row that did not finish
// counts as a failure even if all its cells passed.
func (m *Matrix) Tally() {
	m.Cells, m.Failed = 0, 0
	for _, r := range m.Rows {
		failed := 0
		for _, run := range r.Runs {
			if run.SameAs != "" {
				continue // counted once, as the run it repeats
			}
			m.Cells++
			if !run.OK {
				failed++
			}
		}
		if failed == 0 && !r.OK() {
			failed = 1
		}
		m.Failed += failed
	}
}

func (m *Matrix) cores() int { return max(m.Cores, 1) }

// OK reports whether every cell passed.
func (m *Matrix) OK() bool { return m.Failed == 0 && len(m.Rows) > 0 }

// WriteFiles writes matrix.json and matrix.md into dir.
func (m *Matrix) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "matrix.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "matrix.md"), []byte(m.Markdown()), 0o644)
}
