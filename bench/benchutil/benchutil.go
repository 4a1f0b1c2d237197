// Package benchutil holds what the benchmark programs under bench/ share:
// CPU and memory of a process from /proc, the BPF programs and maps a
// process holds (by its file descriptors, so that programs loaded by other
// processes on the host are never counted), percentiles and the machine
// description for reports.
package benchutil

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// clkTck is USER_HZ, 100 on every Linux architecture Go supports.
const clkTck = 100

// CPUSeconds is utime+stime of the process (all threads), in seconds.
func CPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: split after it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// Fields after ')': state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return float64(ut+st) / clkTck, nil
}

// RunSeconds is the time the threads the process has now spent on a CPU
// (the first field of each /proc/<pid>/task/*/schedstat), in seconds: in
// nanoseconds, where CPUSeconds counts 10 ms ticks. Threads that exited
// are not in it.
func RunSeconds(pid int) (float64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var ns uint64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		v, _ := strconv.ParseUint(f[0], 10, 64)
		ns += v
	}
	return float64(ns) / 1e9, nil
}

// Mem is a process's resident memory in bytes.
type Mem struct{ RSS, HWM uint64 }

// Memory reads VmRSS and VmHWM of the process.
func Memory(pid int) (Mem, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Mem{}, err
	}
	defer f.Close()
	var m Mem
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			m.RSS = kb << 10
		case "VmHWM":
			m.HWM = kb << 10
		}
	}
	return m, sc.Err()
}

// fdinfo returns the fdinfo key/values of every fd of pid whose link
// target is anon_inode:<kind> (bpf-prog, bpf-map).
func fdinfo(pid int, kind string) ([]map[string]string, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for _, e := range ents {
		t, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || t != "anon_inode:"+kind {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		kv := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok {
				kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		out = append(out, kv)
	}
	return out, nil
}

// ProgStat is one BPF program's cumulative kernel statistics.
type ProgStat struct {
	ID     uint32
	Name   string
	RunNs  uint64
	RunCnt uint64
	Missed uint64
}

// Programs lists the BPF programs pid holds file descriptors for, with
// their run time and count (non-zero only while bpf stats are enabled).
// Each program is listed once even if several fds refer to it.
func Programs(pid int) ([]ProgStat, error) {
	infos, err := fdinfo(pid, "bpf-prog")
	if err != nil {
		return nil, err
	}
	seen := map[uint32]bool{}
	var out []ProgStat
	for _, kv := range infos {
		id64, err := strconv.ParseUint(kv["prog_id"], 10, 32)
		if err != nil || seen[uint32(id64)] {
			continue
		}
		seen[uint32(id64)] = true
		p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id64))
		if err != nil {
			continue
		}
		info, err := p.Info()
		st, serr := p.Stats()
		p.Close()
		if err != nil {
			continue
		}
		ps := ProgStat{ID: uint32(id64), Name: info.Name}
		if serr == nil {
			ps.RunNs, ps.RunCnt, ps.Missed = uint64(st.Runtime), st.RunCount, st.RecursionMisses
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b ProgStat) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// BPFStatsSysctl is kernel.bpf_stats_enabled: while it is 1 the kernel
// times every run of every BPF program, as BPF_ENABLE_STATS does while
// held.
const BPFStatsSysctl = "/proc/sys/kernel/bpf_stats_enabled"

// MapStat is one BPF map's memory as the kernel accounts it.
type MapStat struct {
	ID         uint32
	Name       string
	Type       string
	MaxEntries uint32
	Memlock    uint64
}

// Maps lists the BPF maps pid holds file descriptors for, once each, with
// the kernel's memlock accounting from fdinfo.
func Maps(pid int) ([]MapStat, error) {
	infos, err := fdinfo(pid, "bpf-map")
	if err != nil {
		return nil, err
	}
	seen := map[uint32]bool{}
	var out []MapStat
	for _, kv := range infos {
		id64, err := strconv.ParseUint(kv["map_id"], 10, 32)
		if err != nil || seen[uint32(id64)] {
			continue
		}
		seen[uint32(id64)] = true
		ms := MapStat{ID: uint32(id64)}
		ms.Memlock, _ = strconv.ParseUint(kv["memlock"], 10, 64)
		me, _ := strconv.ParseUint(kv["max_entries"], 10, 32)
		ms.MaxEntries = uint32(me)
		if m, err := ebpf.NewMapFromID(ebpf.MapID(id64)); err == nil {
			if info, err := m.Info(); err == nil {
				ms.Name = info.Name
				ms.Type = info.Type.String()
			}
			m.Close()
		}
		out = append(out, ms)
	}
	slices.SortFunc(out, func(a, b MapStat) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Percentile of v (nearest rank); v is sorted in place.
func Percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	if !slices.IsSorted(v) {
		slices.Sort(v)
	}
	i := int(p * float64(len(v)))
	return v[min(len(v)-1, max(0, i))]
}

// Median of v (v is sorted in place).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// Machine describes the host for reports: OS, kernel, CPU count and
// model, memory.
func Machine() string {
	var uts unix.Utsname
	unix.Uname(&uts)
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	var si unix.Sysinfo_t
	unix.Sysinfo(&si)
	mem := float64(si.Totalram) * float64(si.Unit) / (1 << 30)
	osName := "Linux"
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				osName = strings.Trim(v, `"`)
			}
		}
	}
	return fmt.Sprintf("%s, kernel %s, %d x %s, %.1f GiB RAM",
		osName, unix.ByteSliceToString(uts.Release[:]), runtime.NumCPU(), model, mem)
}

// vulnerabilitiesDir is where the kernel reports, per CPU vulnerability,
// whether the CPU is affected and which mitigation it applies.
const vulnerabilitiesDir = "/sys/devices/system/cpu/vulnerabilities"

// CPUVulnerabilities lists the kernel's reports for the CPU
// vulnerabilities that affect this machine ("name: state", sorted by
// name), leaving out "Not affected": the mitigations among them
// (retpolines, return thunks such as SRSO's safe RET) change what every
// kernel call and return costs, JIT-compiled BPF programs' included, so
// a floor measured under one set is not comparable with another's. Nil
// when the kernel does not report them.
func CPUVulnerabilities() []string {
	entries, err := os.ReadDir(vulnerabilitiesDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(vulnerabilitiesDir, e.Name()))
		if err != nil {
			continue
		}
		state := strings.TrimSpace(string(b))
		if state == "Not affected" {
			continue
		}
		out = append(out, e.Name()+": "+state)
	}
	return out
}

// TLBIsolation says how the kernel isolates its page tables from user
// space, from the first CPU's flags in /proc/cpuinfo: "pti" is set while
// page-table isolation is on, "pcid" when the CPU can keep TLB entries of
// several address spaces apart. With pti and no pcid, every entry to and
// exit from the kernel flushes the TLB, so a BPF program's first load from
// each page in every system call walks the page tables: a cost that
// depends on which pages a program touches, not on what it computes. ""
// when /proc/cpuinfo cannot be read or has no flags line.
func TLBIsolation() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	var flags []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	if flags == nil {
		return "" // no x86 flags line (arm64 names them otherwise)
	}
	pti, pcid := slices.Contains(flags, "pti"), slices.Contains(flags, "pcid")
	switch {
	case pti && !pcid:
		return "page-table isolation on (cpu flag pti) and no pcid flag: the TLB is flushed at every entry to and exit from the kernel"
	case pti:
		return "page-table isolation on (cpu flag pti), with pcid: the kernel's and user space's TLB entries are kept apart, not flushed"
	default:
		return "no page-table isolation (no cpu flag pti)"
	}
}

// RaiseNofile raises RLIMIT_NOFILE's soft limit to at least need: to the
// hard limit, and the hard limit itself if need is above it (root with
// CAP_SYS_RESOURCE). It fails only when fewer than need descriptors remain.
func RaiseNofile(need uint64) error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	if rl.Max < need {
		up := rl
		up.Max, up.Cur = need, need
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &up) == nil {
			return nil
		}
	}
	rl.Cur = rl.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	if rl.Max < need {
		return fmt.Errorf("RLIMIT_NOFILE hard limit %d is below the %d descriptors needed and cannot be raised", rl.Max, need)
	}
	return nil
}

// WriteStep is one step of bench/kcost's rebuild of the write program:
// the kcost mode that runs it alone on sock_send_length, its program
// (parts.bpf.c; the empty program of floor.bpf.c first) and what it adds
// to the step it builds on (Base, a mode; empty: the step before it).
// Steps load as the receiver loads its programs, the values of their
// read-only globals inlined (probe.InlineReadOnly), but for one with
// KeepRodata, which reads them from .rodata; and they find the syscall's
// registers as the receiver does on this kernel, but for one with
// RegsByHelper, which asks bpf_task_pt_regs as kernels 5.15 to 6.1 do.
type WriteStep struct {
	Mode, Prog, Adds string
	Base             string
	KeepRodata       bool
	RegsByHelper     bool
}

// StateSteps are the modes of the steps that find a socket's state, each
// in its own way, on top of the port test: the receiver's two tables of
// slots (with BPF atomics), its socket storage and its hash map.
var StateSteps = []string{"step-small", "step-slot", "step-store", "step-hash"}

// StampSteps are the modes of the steps that find a socket's state and
// record a write in it (the clock read and two updates), the least a
// program that times a socket's writes does: in the connection's slot in
// 8192 (like tw_st_slots) and in local storage; no step times writes in
// the front slots.
var StampSteps = []string{"step-state", "step-store-state"}

// WriteSteps are the steps in order; kcost runs them, the report reads
// them back by mode and program.
var WriteSteps = []WriteStep{
	{Mode: "floor", Prog: "tw_fl_sent", Adds: "the hook itself (the empty program)"},
	{Mode: "step-sk", Prog: "tw_pt_0_sk", Adds: "a load from the socket (its port, against a constant)"},
	{Mode: "step-rodata", Prog: "tw_pt_0a_port", Adds: "the watched port, read from .rodata (not inlined)", KeepRodata: true},
	{Mode: "step-port", Prog: "tw_pt_0a_port", Adds: "the same port test, the port inlined at load (the receiver's)"},
	{Mode: "step-slot", Prog: "tw_pt_0b_slot", Adds: "the connection's slot in 8192, found by its hash (inlined lookup, no helper call; 2 MiB, vmalloc'ed: the receiver's tw_st_slots, for a connection whose front slot another holds, after that lookup; BPF atomics, Linux 5.12+)"},
	{Mode: "step-store", Prog: "tw_pt_0b_store", Adds: "instead of the slot: the socket's local storage, looked up (made on the socket's first write; the receiver's for a connection whose two slots others hold)", Base: "step-port"},
	{Mode: "step-hash", Prog: "tw_pt_0b_hash", Adds: "instead of the slot: a hash map keyed by the socket's address (the receiver's for hook types without socket storage)", Base: "step-port"},
	{Mode: "step-small", Prog: "tw_pt_0b_small", Adds: "instead of the slot: 64 slots, so that more connections share one (16 KiB, small enough for the kernel to allocate with kmalloc, in its direct map: the receiver's front slots, tw_st_front, that a connection tries first)", Base: "step-port"},
	{Mode: "step-nested", Prog: "tw_pt_0b_nested", Adds: "instead of the slot: as many slots as the receiver's, in 128 arrays of 64 (an array of maps), each kmalloc'ed", Base: "step-port"},
	{Mode: "step-hot", Prog: "tw_pt_0b_hot", Adds: "instead of the slot: one value that every write of every connection reads (a line that stays in cache; the least any lookup of state costs)", Base: "step-port"},
	{Mode: "step-clock", Prog: "tw_pt_0c_clock", Adds: "a clock read (bpf_ktime_get_ns)", Base: "step-slot"},
	{Mode: "step-state", Prog: "tw_pt_1_state", Adds: "two updates of the state (the write's time, a count)"},
	{Mode: "step-store-state", Prog: "tw_pt_1_store", Adds: "instead of the slot: the clock read and the same two updates in local storage", Base: "step-store"},
	{Mode: "step-args-helper", Prog: "tw_pt_2_args", Adds: "the syscall's arguments, its saved registers found by bpf_task_pt_regs (Linux 5.15 to 6.1)", Base: "step-state", RegsByHelper: true},
	{Mode: "step-args", Prog: "tw_pt_2_args", Adds: "instead: the saved registers read at the top of the task's stack, no helper call (the receiver's, Linux 6.2+)", Base: "step-state"},
	{Mode: "step-tail", Prog: "tw_pt_3_tail", Adds: "the write's last 16 bytes, read from user memory (Linux before 6.2)"},
	{Mode: "step-tail-copy", Prog: "tw_pt_3_copy", Adds: "instead of the arguments and that read: the same 16 bytes read from the kernel's copy of them (the receiver's, Linux 6.2+)", Base: "step-state"},
}

// ProducerReach is the share of its target rate that bench/pipeline's
// producer must reach for a step to count as evidence at that target:
// below it, the step measured the pipeline at a lower rate.
const ProducerReach = 0.95

// ProducerShort reports whether a pipeline step's producer, at
// producedPerS records/s, fell short of its target (0: no target, as fast
// as it goes, never short).
func ProducerShort(producedPerS, target float64) bool {
	return target > 0 && producedPerS < ProducerReach*target
}
