package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenwire/tokenwire/internal/childproc"
)

// result is one flood of one variant.
type result struct {
	Repeat      int
	RxPath      string // napi or inline
	Variant     string
	Seconds     float64 // flood time, from the sender
	Sent        uint64  // frames handed to the veth (sender's count)
	VethDropped uint64  // frames the veth refused (twb-s tx_dropped): receiver full
	Dropped     uint64  // by the variant's rule or program; for "none": received by twb-r
	SenderCPUNs uint64  // sender threads' CPU time (inline: includes the receive softirqs they ran)
	NapiCPUNs   uint64  // receive NAPI thread's CPU time (napi)
	KsoftirqdNs uint64  // all ksoftirqd threads' CPU time
	// SendCPUSoftirqJiffies is the /proc/stat softirq time of the sender's
	// CPUs (tick-sampled): the inline receive path's CPU.
	SendCPUSoftirqJiffies uint64
	SoftirqCores          float64 // /proc/stat softirq, all CPUs (tick-sampled)
	Syscalls              uint64
	Entries               int    // blocklist size
	NapiRuns              uint64 // times the NAPI thread was scheduled in (napi): one per wakeup
	// RxStealJiffies is the rx CPU's steal time in /proc/stat (napi): time
	// the hypervisor ran something else while the guest thought its CPU
	// busy, which the NAPI thread's run time includes.
	RxStealJiffies uint64
	// RxBusyJiffies is the rx CPU's busy time in /proc/stat (napi: user,
	// nice, system, irq, softirq), tick-sampled; minus the NAPI thread's
	// run time it is what else ran there during the flood.
	RxBusyJiffies    uint64
	ProgRuns, ProgNs uint64 // the XDP program's runs and run time (bpf_stats, -bpf-stats)
}

func runOne(self string, t *topo, ksoft, sendCPUList []int, variant string, entries int) (result, error) {
	r := result{Variant: variant, Entries: entries}
	inst, err := install(self, variant, entries, track)
	if err != nil {
		return r, err
	}
	counted := false
	defer func() {
		if !counted { // remove the variant even when the flood failed
			inst.count()
		}
	}()
	time.Sleep(*settle)
	ls0, err := readLinkStats(nsSnd, ifSnd)
	if err != nil {
		return r, err
	}

	cmd := exec.Command("ip", "netns", "exec", nsSnd, self, "send", "-duration", duration.String(), "-dst-mac", t.rcvMAC,
		"-tx", *txMode, "-cpus", *sendCPUs, "-batch", strconv.Itoa(*batch))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return r, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := childproc.Start(cmd); err != nil {
		return r, err
	}
	track(cmd, true)
	defer track(cmd, false)
	// Bounded: a sender that hangs is killed well after its flood time.
	timer := time.AfterFunc(*duration+30*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	br := bufio.NewReader(stdout)
	if l, err := br.ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		return r, fmt.Errorf("sender: %q %v", l, err)
	}
	c0, err := snapshot(t.napiPID, ksoft)
	if err != nil {
		return r, err
	}
	p0 := xdpProgStats()
	fmt.Fprintln(stdin, "go")
	var sr sendResult
	derr := json.NewDecoder(br).Decode(&sr)
	if werr := cmd.Wait(); werr != nil || derr != nil {
		return r, fmt.Errorf("sender: %v %v", werr, derr)
	}
	// Let the receiver finish what is queued before reading its CPU time
	// and the counters: a few hundred frames, which a slow variant (a
	// linear chain of 65,536 rules) takes a long time over.
	drain(t.napiPID)
	c1, err := snapshot(t.napiPID, ksoft)
	if err != nil {
		return r, err
	}
	p1 := xdpProgStats()
	r.ProgRuns, r.ProgNs = p1.runs-p0.runs, p1.ns-p0.ns
	r.NapiRuns = c1.napiRuns - c0.napiRuns
	if t.napiPID > 0 {
		r.RxStealJiffies = c1.perCPU[*rxCPU][7] - c0.perCPU[*rxCPU][7]
		for _, i := range []int{0, 1, 2, 5, 6} {
			r.RxBusyJiffies += c1.perCPU[*rxCPU][i] - c0.perCPU[*rxCPU][i]
		}
	}
	ls1, err := readLinkStats(nsSnd, ifSnd)
	if err != nil {
		return r, err
	}
	counted = true
	if r.Dropped, err = inst.count(); err != nil {
		return r, err
	}
	r.Seconds, r.Sent, r.SenderCPUNs, r.Syscalls = sr.Seconds, sr.Sent, sr.CPUNs, sr.Syscalls
	r.VethDropped = ls1.sub(ls0).TxDropped
	r.NapiCPUNs = c1.napiNs - c0.napiNs
	for _, cpu := range sendCPUList {
		r.SendCPUSoftirqJiffies += c1.perCPU[cpu][6] - c0.perCPU[cpu][6]
	}
	r.KsoftirqdNs = c1.ksoftNs - c0.ksoftNs
	r.SoftirqCores = softirqCores(c0, c1)
	return r, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// drain waits until the receive path is idle: 50 ms, and on the napi path
// until the NAPI thread's CPU time stops growing (bounded by 10 s).
func drain(napiPID int) {
	time.Sleep(50 * time.Millisecond)
	if napiPID == 0 {
		return
	}
	last, _, _ := schedstat(napiPID)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		ns, _, err := schedstat(napiPID)
		if err != nil || ns-last < uint64(time.Millisecond) {
			return
		}
		last = ns
	}
}
