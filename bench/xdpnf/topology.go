package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The topology. Everything the benchmark creates lives in these two
// namespaces, so deleting them removes the veth pair, the netfilter rules
// and any XDP program still attached: teardown cannot miss a rule, and it
// never touches anything outside.
const (
	nsSnd, nsRcv = "twb-snd", "twb-rcv"
	ifSnd, ifRcv = "twb-s", "twb-r"
	// Documentation range (RFC 5737 TEST-NET-2); the sender's address is
	// the blocklisted source.
	ipSnd, ipRcv = "198.51.100.1", "198.51.100.2"
)

// sh runs a command and returns its combined output; the error carries it.
func sh(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// inRcv runs a command inside the receiver's namespace.
func inRcv(args ...string) (string, error) {
	return sh(append([]string{"ip", "netns", "exec", nsRcv}, args...)...)
}

// teardown deletes both namespaces (and with them the veth pair, the rules
// and attached programs). It is safe to call more than once.
func teardown() {
	_ = exec.Command("ip", "netns", "del", nsSnd).Run()
	_ = exec.Command("ip", "netns", "del", nsRcv).Run()
}

// rxPath says how the receiving veth end processes frames.
type rxPath struct {
	// napi: GRO on (which gives veth a NAPI instance even without XDP) and
	// threaded NAPI, so the whole receive path runs in one kernel thread
	// that can be pinned to its own CPU and whose CPU time is exact.
	// Otherwise veth's default: veth_xmit hands the skb to netif_rx and
	// the receive runs in the sender's context (backlog softirq).
	napi  bool
	rxCPU int // CPU for the NAPI thread (napi only)
}

// topo is a set-up pair of namespaces.
type topo struct {
	rcvMAC  string
	napiPID int // the receive NAPI thread (0 without threaded NAPI)
}

// setup creates the namespaces and the veth pair and, for the NAPI path,
// switches twb-r to threaded NAPI on its own CPU.
func setup(rx rxPath) (*topo, error) {
	teardown() // leftovers of an interrupted run of ours (same names)
	steps := [][]string{
		{"ip", "netns", "add", nsSnd},
		{"ip", "netns", "add", nsRcv},
		{"ip", "link", "add", ifSnd, "netns", nsSnd, "type", "veth", "peer", "name", ifRcv, "netns", nsRcv},
		{"ip", "-n", nsSnd, "addr", "add", ipSnd + "/24", "dev", ifSnd},
		{"ip", "-n", nsRcv, "addr", "add", ipRcv + "/24", "dev", ifRcv},
		{"ip", "-n", nsSnd, "link", "set", ifSnd, "up"},
		{"ip", "-n", nsRcv, "link", "set", ifRcv, "up"},
		{"ip", "-n", nsSnd, "link", "set", "lo", "up"},
		{"ip", "-n", nsRcv, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if _, err := sh(s...); err != nil {
			return nil, err
		}
	}
	out, err := sh("ip", "-n", nsRcv, "-o", "link", "show", ifRcv)
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`link/ether ([0-9a-f:]{17})`).FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no MAC for %s in %q", ifRcv, out)
	}
	t := &topo{rcvMAC: m[1]}
	if !rx.napi {
		return t, nil
	}
	if err := inNetns(nsRcv, func() error { return setFeature(ifRcv, ethtoolSGRO, true) }); err != nil {
		return nil, fmt.Errorf("GRO on %s: %w", ifRcv, err)
	}
	// veth_xmit only uses the peer's NAPI for an skb it deems eligible for
	// GRO: a sender device without TSO (or a TCP/UDP socket's skb). Native
	// XDP on the peer turns TSO off by itself; do it for every variant so
	// that all take the same path.
	if err := inNetns(nsSnd, func() error { return setFeature(ifSnd, ethtoolSTSO, false) }); err != nil {
		return nil, fmt.Errorf("TSO off on %s: %w", ifSnd, err)
	}
	// /sys/class/net inside the namespace: ip netns exec mounts it.
	if _, err := inRcv("sh", "-c", "echo 1 > /sys/class/net/"+ifRcv+"/threaded"); err != nil {
		return nil, fmt.Errorf("threaded NAPI on %s: %w", ifRcv, err)
	}
	pid, err := findThread("napi/" + ifRcv + "-")
	if err != nil {
		return nil, err
	}
	var set unix.CPUSet
	set.Set(rx.rxCPU)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		return nil, fmt.Errorf("pinning NAPI thread %d to CPU %d: %w", pid, rx.rxCPU, err)
	}
	t.napiPID = pid
	return t, nil
}

// findThread returns the pid of the kernel thread whose name starts with
// prefix (there must be exactly one).
func findThread(prefix string) (int, error) {
	dirs, _ := filepath.Glob("/proc/[0-9]*/comm")
	var found []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil || !strings.HasPrefix(string(b), prefix) {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(d, "/")[2])
		found = append(found, pid)
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("kernel threads named %s*: %v, want exactly one", prefix, found)
	}
	return found[0], nil
}

// inNetns runs fn on a thread inside the named namespace. The thread is
// not returned to the Go scheduler (it ends with the goroutine), so no
// other goroutine can inherit the namespace.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		f, err := os.Open("/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// ethtool ioctl commands (linux/ethtool.h).
const (
	ethtoolSTSO = 0x0000001f // set TCP segmentation offload (all TSO features)
	ethtoolSGRO = 0x0000002c // set generic receive offload
)

// setFeature switches an offload with the ethtool ioctl (SIOCETHTOOL), so
// no ethtool binary is needed.
func setFeature(ifname string, cmd uint32, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	val := struct{ cmd, data uint32 }{cmd: cmd}
	if on {
		val.data = 1
	}
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:], ifname)
	ifr.data = uintptr(unsafe.Pointer(&val))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&val)
	if e != 0 {
		return e
	}
	return nil
}

// linkStats are the interface counters that account for every frame.
type linkStats struct {
	RxPackets, RxDropped, TxPackets, TxDropped uint64
}

// readLinkStats reads an interface's counters in a namespace (ip -j -s).
func readLinkStats(ns, dev string) (linkStats, error) {
	out, err := sh("ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev)
	if err != nil {
		return linkStats{}, err
	}
	var v []struct {
		Stats64 struct {
			Rx struct{ Packets, Dropped uint64 } `json:"rx"`
			Tx struct{ Packets, Dropped uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v) != 1 {
		return linkStats{}, fmt.Errorf("ip -j -s link show %s: %v in %q", dev, err, out)
	}
	s := v[0].Stats64
	return linkStats{s.Rx.Packets, s.Rx.Dropped, s.Tx.Packets, s.Tx.Dropped}, nil
}

func (a linkStats) sub(b linkStats) linkStats {
	return linkStats{a.RxPackets - b.RxPackets, a.RxDropped - b.RxDropped, a.TxPackets - b.TxPackets, a.TxDropped - b.TxDropped}
}

// cpuSnap is what the machine's CPU accounting says at one instant.
type cpuSnap struct {
	at       time.Time
	napiNs   uint64            // NAPI thread's sum_exec_runtime (schedstat)
	napiRuns uint64            // and the times it was scheduled in
	ksoftNs  uint64            // all ksoftirqd threads' runtime
	perCPU   map[int][8]uint64 // /proc/stat jiffies: user nice system idle iowait irq softirq steal
}

// schedNs reads a task's total CPU time in ns from /proc/<pid>/schedstat
// (exact, unlike tick-sampled utime/stime; without
// CONFIG_IRQ_TIME_ACCOUNTING it includes interrupts that hit the task).
func schedNs(pid int) (uint64, error) {
	ns, _, err := schedstat(pid)
	return ns, err
}

// schedstat reads a task's CPU time and the number of times it was
// scheduled in (for a kernel thread that sleeps when idle, its wakeups).
func schedstat(pid int) (ns, runs uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0, 0, fmt.Errorf("schedstat of %d: %q", pid, b)
	}
	if ns, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		runs, err = strconv.ParseUint(f[2], 10, 64)
	}
	return ns, runs, err
}

// ksoftirqdPIDs lists the ksoftirqd/N threads: when the softirq load is
// too long for the context that raised it, the kernel defers it there.
func ksoftirqdPIDs() []int {
	var pids []int
	for cpu := range runtime.NumCPU() {
		if pid, err := findThread(fmt.Sprintf("ksoftirqd/%d\n", cpu)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func snapshot(napiPID int, ksoft []int) (cpuSnap, error) {
	s := cpuSnap{at: time.Now(), perCPU: map[int][8]uint64{}}
	var err error
	if napiPID > 0 {
		if s.napiNs, s.napiRuns, err = schedstat(napiPID); err != nil {
			return s, err
		}
	}
	for _, p := range ksoft {
		n, err := schedNs(p)
		if err != nil {
			return s, err
		}
		s.ksoftNs += n
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		cpu, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var v [8]uint64
		for i := range v {
			v[i], _ = strconv.ParseUint(f[i+1], 10, 64)
		}
		s.perCPU[cpu] = v
	}
	return s, nil
}

// userHZ is the unit of /proc/stat (USER_HZ, 100 on Linux).
const userHZ = 100

// softirqCores is the softirq time all CPUs accumulated between two
// snapshots, in cores (tick-sampled: coarse, a check, not a measure).
func softirqCores(a, b cpuSnap) float64 {
	var j uint64
	for cpu, v := range b.perCPU {
		j += v[6] - a.perCPU[cpu][6]
	}
	return float64(j) / userHZ / b.at.Sub(a.at).Seconds()
}
