package main

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
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
	// Reboots are the boots of this guest that panicked and were repeated
	// (BootAgain); the row's results are the last boot's, and the runs
	// that ended in a boot the next one resumed.
	Reboots []Reboot `json:"reboots,omitempty"`
}

// Reboot is a guest boot that panicked and was repeated, kept for the
// report.
type Reboot struct {
	Problem    string  `json:"problem"`
	Seconds    float64 `json:"seconds"`
	ConsoleLog string  `json:"console_log"`
	// Kept are the runs that ended before the panic: their results stand,
	// and the next boot ran the rest of the plan.
	Kept []string `json:"kept,omitempty"`
}

// int3Oops is how the kernel reports an int3 trap in its own text that no
// patch site claimed.
const int3Oops = "Oops: int3"

// doubleFault is how x86 reports a double fault; stackGuard, the line it
// adds when the fault was a kernel stack overflowing into its guard page.
const (
	doubleFault = "PANIC: double fault"
	stackGuard  = "stack guard page"
)

// eflagsRE finds the flags register in a register dump.
var eflagsRE = regexp.MustCompile(`EFLAGS: ([0-9a-f]+)`)

// impossibleFlags reports whether hex, a flags register as a register
// dump prints it, has a bit set above 21 (ID): those are reserved, and no
// x86-64 CPU sets them.
func impossibleFlags(hex string) bool {
	v, err := strconv.ParseUint(hex, 16, 64)
	return err != nil || v>>22 != 0
}

// BootAgain reports whether a guest's boot should be repeated, why, and
// which of its runs stand. Under TCG a guest kernel can panic where the
// code under test has no part:
//   - before /init (6.12 has shown a fatal exception in interrupt a few
//     seconds in): nothing of the plan ran, and all of it runs again;
//   - at an int3 trap in kernel text that no patch site claims (int3Oops).
//     The kernel patches its text live (static keys, kprobes, ftrace) by
//     writing an int3 over a site while it rewrites the rest, and on
//     hardware no CPU can run the int3 once the patching ends; under
//     multi-threaded TCG a vCPU can run a stale translation of the site
//     after that (6.12 at boot, and right after a test closed its perf
//     events);
//   - at a double fault whose saved flags register has reserved bits set,
//     which no x86-64 CPU can push (impossibleFlags; 6.12 has shown one
//     in SLUB's allocation fast path under the verifier, bits of RAX's
//     in the flags), and that was no stack overflow (stackGuard).
//
// After either fault the runs that ended stand (kept), and the next boot
// runs the rest, from the one the fault cut short: a fault of the code
// under test would come back there.
//
// A guest that hung, never started, or panicked any other way once the
// plan ran is not repeated: the first and the last would hide a failure,
// the others would only fail again.
func BootAgain(s *Session) (why string, kept map[string]*RunOutput, again bool) {
	var panicked, emulated string
	doubled, guarded := "", false
	for _, l := range s.Other {
		if i := strings.Index(l, "Kernel panic"); i >= 0 && panicked == "" {
			panicked = strings.TrimSpace(l[i:])
		}
		if i := strings.Index(l, int3Oops); i >= 0 && emulated == "" {
			emulated = strings.TrimSpace(l[i:])
		}
		if i := strings.Index(l, doubleFault); i >= 0 && doubled == "" {
			doubled = strings.TrimSpace(l[i:])
		}
		guarded = guarded || strings.Contains(l, stackGuard)
		if m := eflagsRE.FindStringSubmatch(l); m != nil && doubled != "" && !guarded && emulated == "" && impossibleFlags(m[1]) {
			emulated = doubled + " with EFLAGS " + m[1]
		}
	}
	switch {
	case panicked == "":
		return "", nil, false
	case !s.Booted:
		return panicked, nil, true
	case emulated == "" || s.Done:
		return "", nil, false
	}
	kept = map[string]*RunOutput{}
	for id, r := range s.Runs {
		if r.Ended {
			kept[id] = r
		}
	}
	return emulated + "; " + panicked, kept, true
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
// native plan) printed: e, and s parsed from its lines. limit is the
// overall timeout it ran under. kept are runs an earlier boot ended,
// which this one skipped (BootAgain).
func BuildRow(base Row, plan []Run, e Exec, s *Session, limit time.Duration, kept map[string]*RunOutput) Row {
	runs := maps.Clone(s.Runs)
	for id, r := range kept {
		if _, ok := runs[id]; !ok {
			runs[id] = r
		}
	}
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
			res = Judge(r, runs[r.ID], row.Problem)
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
