package main

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Row is one kernel's line of the matrix.
type Row struct {
	Name    string `json:"name"`
	Distro  string `json:"distro"`
	Version string `json:"version"` // package version, or uname -r natively
	Mode    string `json:"mode"`    // qemu or native
	Uname   string `json:"uname"`   // uname -r as the plan saw it
	URL     string `json:"url,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	// BootSeconds: qemu start to /init (guests). TestSeconds: the plan.
	// TotalSeconds: qemu start to exit, or the native plan's wall time.
	BootSeconds  float64 `json:"boot_seconds"`
	TestSeconds  float64 `json:"test_seconds"`
	TotalSeconds float64 `json:"total_seconds"`
	// CPUSeconds: qemu's (or the plan's) user+system time; against
	// TotalSeconds it says how much of the cores a guest keeps busy.
	CPUSeconds float64     `json:"cpu_seconds"`
	Finished   bool        `json:"finished"`
	Problem    string      `json:"problem,omitempty"`
	Runs       []RunResult `json:"runs"`
	// HookMatrix is the availability table the tests printed, one line
	// per (capability, point, kind), first seen wins.
	HookMatrix     []HookMatrix `json:"hook_matrix"`
	KernelWarnings []string     `json:"kernel_warnings,omitempty"`
	ConsoleLog     string       `json:"console_log"`
	// Reboots are the boots of this guest that panicked before /init and
	// were repeated (BootAgain); the row's results are the last boot's.
	Reboots []Reboot `json:"reboots,omitempty"`
}

// Reboot is a guest boot that panicked before /init, kept for the report.
type Reboot struct {
	Problem    string  `json:"problem"`
	Seconds    float64 `json:"seconds"`
	ConsoleLog string  `json:"console_log"`
}

// BootAgain reports whether a guest's boot should be repeated, and why: it
// panicked before /init. Under TCG a guest kernel can panic while it boots
// (6.12 has shown a fatal exception in interrupt a few seconds in), before
// the initramfs runs anything; such a boot says nothing of the code under
// test. A guest that booted, hung, or never started is not repeated: the
// first would hide a failure, the others would only fail again.
func BootAgain(e Exec) (string, bool) {
	s := ParseSession(e.Lines)
	if s.Booted {
		return "", false
	}
	for _, l := range s.Other {
		if i := strings.Index(l, "Kernel panic"); i >= 0 {
			return strings.TrimSpace(l[i:]), true
		}
	}
	return "", false
}

// OK reports whether every run of the row passed and the plan finished.
func (r Row) OK() bool {
	if !r.Finished || r.Problem != "" {
		return false
	}
	for _, run := range r.Runs {
		if !run.OK {
			return false
		}
	}
	return true
}

var kernelTroubleRE = regexp.MustCompile(`WARNING:|BUG:|Oops|Kernel panic|general protection|Call Trace|segfault|blocked for more than`)

// BuildRow judges every run of the plan against what the guest (or the
// native plan) printed. limit is the overall timeout it ran under.
func BuildRow(base Row, plan []Run, e Exec, limit time.Duration) Row {
	s := ParseSession(e.Lines)
	total := e.Wall
	row := base
	row.Uname = s.Uname
	row.TotalSeconds = total.Seconds()
	row.CPUSeconds = e.CPU.Seconds()
	row.Finished = s.Done
	if row.Mode == "qemu" {
		if s.Booted {
			row.BootSeconds = s.BootAt.Seconds()
		}
		if s.Done && s.Booted {
			row.TestSeconds = (s.DoneAt - s.BootAt).Seconds()
		}
	} else if s.Done {
		row.TestSeconds = s.DoneAt.Seconds()
	}
	if !s.Done {
		row.Problem = sessionProblem(row.Mode, s, e.Err, total, limit)
	}
	byID := map[string]RunResult{}
	for _, r := range plan {
		var res RunResult
		if ref, ok := byID[r.SameAs]; ok {
			res = ref
			res.ID, res.Hook, res.SameAs = r.ID, r.Hook, r.SameAs
		} else {
			res = Judge(r, s.Runs[r.ID], row.Problem)
		}
		byID[r.ID] = res
		row.Runs = append(row.Runs, res)
	}
	seen := map[[3]string]bool{}
	for _, run := range row.Runs {
		for _, hm := range run.HookMatrix {
			key := [3]string{hm.Capability, hm.Point, hm.Kind}
			if !seen[key] {
				seen[key] = true
				row.HookMatrix = append(row.HookMatrix, hm)
			}
		}
	}
	slices.SortStableFunc(row.HookMatrix, func(a, b HookMatrix) int {
		return cmp.Or(cmp.Compare(a.Capability, b.Capability), cmp.Compare(a.Point, b.Point))
	})
	for _, l := range append(slices.Clone(s.Other), s.Dmesg...) {
		if kernelTroubleRE.MatchString(l) && len(row.KernelWarnings) < 20 {
			row.KernelWarnings = append(row.KernelWarnings, strings.TrimSpace(l))
		}
	}
	return row
}

// sessionProblem says why a plan did not finish.
func sessionProblem(mode string, s *Session, exitErr error, total, limit time.Duration) string {
	var why []string
	switch {
	case mode == "qemu" && !s.Booted:
		why = append(why, "the guest never reached /init")
	case total >= limit:
		why = append(why, fmt.Sprintf("did not finish within the overall timeout of %s", limit))
	default:
		why = append(why, "the plan stopped before its end")
	}
	if exitErr != nil {
		why = append(why, exitErr.Error())
	}
	for _, l := range s.Other {
		if strings.Contains(l, "Kernel panic") {
			why = append(why, strings.TrimSpace(l))
			break
		}
	}
	return strings.Join(why, "; ")
}
