// Command kernels is `make kernels`: it boots each pinned kernel
// (kernels/kernels.json) under qemu with a busybox initramfs that carries
// the BPF packages' test binaries, runs the same test plan in each guest
// and on this machine's own kernel, and writes the matrix to
// kernels/results/matrix.{md,json}. It exits 1 if any cell fails.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cacheEnv overrides where kernel packages are cached.
const cacheEnv = "TOKENWIRE_KERNEL_CACHE"

// guestBoots is how many times a guest may be booted when its kernel
// panics where the code under test has no part (BootAgain).
const guestBoots = 2

type options struct {
	pins, cache, work, out, busybox string
	only                            []string
	runs                            []string // globs over run ids (path.Match), e.g. "default/*"; empty: all
	tests                           []string // replace every selected run's tests when set
	docs, readme                    string   // rendered from the matrix when set
	jobs                            int
	testTimeout, guestTimeout       time.Duration
}

func main() {
	var o options
	var only, runs, tests, render string
	flag.StringVar(&o.pins, "pins", "kernels/kernels.json", "kernel pin file")
	flag.StringVar(&o.cache, "cache", cmp.Or(os.Getenv(cacheEnv), "_build/kernels/cache"), "kernel package cache (env "+cacheEnv+")")
	flag.StringVar(&o.work, "work", "_build/kernels", "work directory: console logs and the run's temporary files")
	flag.StringVar(&o.out, "out", "kernels/results", "where matrix.md and matrix.json go")
	flag.StringVar(&o.busybox, "busybox", "/bin/busybox", "static busybox for the initramfs (Debian: busybox-static)")
	flag.StringVar(&only, "only", "", "comma-separated rows to run (kernel names, "+nativeRow+"); default all")
	// Three: a guest under TCG keeps about 0.6 of a core busy (its tests
	// mostly wait), so on two cores all three pinned kernels at once finish
	// first (measured: kernels/results/matrix.md, cpu s against total s).
	flag.StringVar(&runs, "runs", "", "comma-separated globs over run ids (<hook>/<capability>, e.g. default/stream,*/receiver) to run; default all. for working on one cell; the others are left out of the matrix")
	flag.StringVar(&tests, "tests", "", "comma-separated top-level test names: the selected runs run these, in place of the plan's")
	flag.StringVar(&o.docs, "docs", "", "write the kernel docs (docs/kernels.md) from the matrix")
	flag.StringVar(&o.readme, "readme", "", "fill the README's kernels block from the matrix")
	flag.StringVar(&render, "render", "", "render -docs and -readme from this matrix.json and exit (no run)")
	flag.IntVar(&o.jobs, "jobs", 3, "guests booted at a time")
	// Per test, not per binary: each top-level test runs in an invocation
	// of its own. The slowest under emulation take 1-3 min
	// (TestEveryHookType loads the stream probe 15 times;
	// TestTablesMatchReference's BPF_PROG_TEST_RUN lookups, about 8 ms
	// each on 5.10), and over 5 min where emulation is slower (seen here).
	flag.DurationVar(&o.testTimeout, "test-timeout", 10*time.Minute, "per top-level test (Go's -test.timeout; killed 30 s later)")
	// The plan takes a guest 20-22 min with three at once on 2 cores in a
	// clean CI run (the Python and Node TLS tests included), and has taken
	// over 35 on a slow hour of this shared machine. A timeout is a failed
	// cell, so the bound leaves room: 45 min keeps the matrix within 46
	// and .ci/run within about 55 on such an hour, under 45 on most.
	flag.DurationVar(&o.guestTimeout, "guest-timeout", 45*time.Minute, "per guest, boot to poweroff (and for the native row)")
	flag.Parse()
	if only != "" {
		o.only = strings.Split(only, ",")
	}
	if runs != "" {
		o.runs = strings.Split(runs, ",")
	}
	if tests != "" {
		o.tests = strings.Split(tests, ",")
	}
	if render != "" {
		m, err := LoadMatrix(render)
		if err == nil {
			err = RenderDocs(m, filepath.Join(filepath.Dir(render), "matrix.md"), o.docs, o.readme)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "kernels:", err)
			os.Exit(2)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernels:", err)
		os.Exit(2)
	}
	if !m.OK() {
		fmt.Fprint(os.Stderr, m.FailuresSection())
		fmt.Fprintf(os.Stderr, "kernels: %d of %d cells failed (see %s)\n", m.Failed, m.Cells, filepath.Join(o.out, "matrix.md"))
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (*Matrix, error) {
	start, busy0 := time.Now(), busySeconds()
	pins, err := LoadPins(o.pins)
	if err != nil {
		return nil, err
	}
	wanted := func(name string) bool { return len(o.only) == 0 || slices.Contains(o.only, name) }
	var kernels []Kernel
	for _, p := range pins {
		if !wanted(p.Name) {
			continue
		}
		k, err := Fetch(ctx, p, o.pins, o.cache, os.Stderr)
		if err != nil {
			return nil, err
		}
		kernels = append(kernels, k)
	}

	pkgs, err := DiscoverPackages(ctx, ".")
	if err != nil {
		return nil, err
	}
	logs := filepath.Join(o.work, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(o.work, "run-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	stage := filepath.Join(tmp, "stage")
	if err := BuildTestBinaries(ctx, ".", stage, pkgs, os.Stderr); err != nil {
		return nil, err
	}
	guestPlan := SelectRuns(BuildPlan(pkgs, true, o.testTimeout), o.runs, o.tests)
	nativePlan := SelectRuns(BuildPlan(pkgs, false, o.testTimeout), o.runs, o.tests)
	if len(guestPlan) == 0 {
		return nil, fmt.Errorf("-runs %s selects no run", strings.Join(o.runs, ","))
	}
	if err := os.WriteFile(filepath.Join(stage, "plan.sh"), []byte(PlanScript(guestPlan)), 0o644); err != nil {
		return nil, err
	}
	nativeScript := filepath.Join(tmp, "plan-native.sh")
	if err := os.WriteFile(nativeScript, []byte(PlanScript(nativePlan)), 0o644); err != nil {
		return nil, err
	}
	initrd := filepath.Join(tmp, "initramfs.cpio")
	if len(kernels) > 0 {
		stacks, err := StackPaths()
		if err != nil {
			return nil, err
		}
		if err := BuildInitramfs(initrd, o.busybox, stage, stacks); err != nil {
			return nil, err
		}
	}

	// The native row runs beside the guests, which run niced (BootGuest):
	// its timing-sensitive tests get the cores when they want them, and
	// the guests take what the native plan leaves, instead of waiting the
	// native plan's minutes out.
	var nativeRows []Row
	var nativeDone sync.WaitGroup
	if wanted(nativeRow) {
		nativeDone.Go(func() {
			base := Row{Name: nativeRow, Distro: osRelease() + " (this machine)", Version: hostRelease(), Mode: "native",
				ConsoleLog: filepath.Join(logs, nativeRow+".log")}
			fmt.Fprintf(os.Stderr, "kernels: %s: running the plan on %s\n", nativeRow, base.Version)
			e := RunNative(ctx, stage, nativeScript, o.guestTimeout, base.ConsoleLog, progress(nativeRow))
			nativeRows = append(nativeRows, BuildRow(base, nativePlan, e, ParseSession(e.Lines), o.guestTimeout, nil))
		})
	}
	guestRows := make([]Row, len(kernels))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(o.jobs, 1))
	for i, k := range kernels {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			base := Row{Name: k.Name, Distro: k.Distro, Version: k.Version, Mode: "qemu", URL: k.URL, SHA256: k.SHA256,
				ConsoleLog: filepath.Join(logs, k.Name+".log")}
			if ctx.Err() != nil {
				guestRows[i] = BuildRow(base, guestPlan, Exec{Err: ctx.Err()}, ParseSession(nil), o.guestTimeout, nil)
				return
			}
			fmt.Fprintf(os.Stderr, "kernels: %s: booting %s\n", k.Name, filepath.Base(k.Vmlinuz))
			e := BootGuest(ctx, k, initrd, nil, o.guestTimeout, base.ConsoleLog, progress(k.Name))
			s := ParseSession(e.Lines)
			kept := map[string]*RunOutput{}
			for boot := 1; boot < guestBoots && ctx.Err() == nil; boot++ {
				why, ended, again := BootAgain(s)
				if !again {
					break
				}
				failed := strings.TrimSuffix(base.ConsoleLog, ".log") + fmt.Sprintf(".boot%d.log", boot)
				if err := os.Rename(base.ConsoleLog, failed); err != nil {
					failed = base.ConsoleLog + " (overwritten: " + err.Error() + ")"
				}
				base.Reboots = append(base.Reboots, Reboot{Problem: why, Seconds: e.Wall.Seconds(), ConsoleLog: failed,
					Kept: slices.Sorted(maps.Keys(ended))})
				maps.Copy(kept, ended)
				fmt.Fprintf(os.Stderr, "kernels: %s: panicked (%s); booting it again, %d runs kept\n", k.Name, why, len(ended))
				e = BootGuest(ctx, k, initrd, slices.Sorted(maps.Keys(kept)), o.guestTimeout, base.ConsoleLog, progress(k.Name))
				s = ParseSession(e.Lines)
			}
			guestRows[i] = BuildRow(base, guestPlan, e, s, o.guestTimeout, kept)
		})
	}
	wg.Wait()
	nativeDone.Wait()
	rows := append(nativeRows, guestRows...)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted: no results written")
	}

	m := &Matrix{
		Date: start.UTC().Format(time.RFC3339), GoVersion: runtime.Version(),
		QemuVersion: QemuVersion(), QemuCommand: QemuCommandLine(),
		Host: fmt.Sprintf("this machine: Linux %s, %d cores", hostRelease(), runtime.NumCPU()),
		Jobs: o.jobs, Cores: runtime.NumCPU(), Hooks: Hooks(), Rows: rows,
		Excluded: SkipsOf(guestSkips, pkgs), HookRunSkips: SkipsOf(hookRunSkips, pkgs), HookRunOnly: OnlyOf(hookRunOnly, pkgs), GuestOnly: OnlyOf(guestOnly, pkgs),
	}
	m.Commit, m.Dirty = gitCommit()
	for _, p := range pkgs {
		m.Capabilities = append(m.Capabilities, p.Capability)
	}
	m.WallSeconds = time.Since(start).Seconds()
	m.BusySeconds = busySeconds() - busy0
	for _, r := range rows {
		m.OwnSeconds += r.CPUSeconds
	}
	m.Tally()
	if err := m.WriteFiles(o.out); err != nil {
		return nil, err
	}
	if err := RenderDocs(m, filepath.Join(o.out, "matrix.md"), o.docs, o.readme); err != nil {
		return nil, err
	}
	fmt.Print(m.Markdown())
	return m, nil
}

// progress prints the plan's milestones to stderr as they happen, so a CI
// log shows where a long run is.
func progress(row string) func(Line) {
	var mu sync.Mutex
	return func(l Line) {
		i := strings.Index(l.Text, marker+" ")
		if i < 0 {
			return
		}
		verb, arg, _ := strings.Cut(l.Text[i+len(marker)+1:], " ")
		switch verb {
		case "boot", "begin", "end", "done":
			mu.Lock()
			fmt.Fprintf(os.Stderr, "kernels: %s: +%.1fs %s %s\n", row, l.At.Seconds(), verb, arg)
			mu.Unlock()
		}
	}
}
