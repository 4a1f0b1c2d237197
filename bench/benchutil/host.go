package benchutil

// How busy the host was around a measurement, and how much of that was
// the benchmark itself: the machine is shared, so every section records
// the other processes' CPU next to its numbers.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// HostLoad is the host's CPU over an interval.
type HostLoad struct {
	Seconds     float64 `json:"seconds"`
	LoadStart   float64 `json:"loadavg1_start"` // 1-minute load average at the start
	LoadEnd     float64 `json:"loadavg1_end"`
	BusyCores   float64 `json:"busy_cores"`   // all CPUs, /proc/stat (user, nice, system, irq, softirq, steal)
	OwnCores    float64 `json:"own_cores"`    // this process and its descendants (reaped ones included)
	OthersCores float64 `json:"others_cores"` // busy - own: other processes, and kernel threads
	StealCores  float64 `json:"steal_cores"`  // time the hypervisor gave to other guests
}

// HostSampler measures a HostLoad from Start to Stop.
type HostSampler struct {
	t0                    time.Time
	busy0, steal0, total0 uint64
	own0, load0           float64
}

// StartHost starts measuring.
func StartHost() *HostSampler {
	h := &HostSampler{t0: time.Now(), load0: LoadAvg1()}
	h.busy0, h.steal0, h.total0 = hostJiffies()
	h.own0 = OwnTreeCPU()
	return h
}

// Stop returns the load since Start (it can be called more than once).
func (h *HostSampler) Stop() HostLoad {
	busy, steal, _ := hostJiffies()
	secs := time.Since(h.t0).Seconds()
	l := HostLoad{Seconds: secs, LoadStart: h.load0, LoadEnd: LoadAvg1()}
	if secs <= 0 {
		return l
	}
	l.BusyCores = float64(busy-h.busy0) / clkTck / secs
	l.StealCores = float64(steal-h.steal0) / clkTck / secs
	l.OwnCores = (OwnTreeCPU() - h.own0) / secs
	l.OthersCores = max(l.BusyCores-l.OwnCores, 0)
	return l
}

// hostJiffies is /proc/stat's aggregate busy (user, nice, system, irq,
// softirq, steal), steal and total jiffies.
func hostJiffies() (busy, steal, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i := 1; i < len(f) && i <= 8; i++ {
		v, _ := strconv.ParseUint(f[i], 10, 64)
		total += v
		if i != 4 && i != 5 { // idle, iowait
			busy += v
		}
		if i == 8 {
			steal = v
		}
	}
	return
}

// LoadAvg1 is the 1-minute load average.
func LoadAvg1() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// procTimes is utime+stime and cutime+cstime of pid, in seconds, and its
// parent.
func procTimes(pid string) (own, children float64, ppid string, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, "", err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, "", fmt.Errorf("/proc/%s/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, "", fmt.Errorf("/proc/%s/stat: short", pid)
	}
	var v [4]float64
	for k := range v {
		x, _ := strconv.ParseUint(f[11+k], 10, 64)
		v[k] = float64(x) / clkTck
	}
	return v[0] + v[1], v[2] + v[3], f[1], nil
}

// OwnTreeCPU is the CPU seconds of this process and every live
// descendant, each with its reaped children's: the difference between two
// readings is what this benchmark's process tree used in between.
func OwnTreeCPU() float64 {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type proc struct {
		cpu  float64
		ppid string
	}
	procs := map[string]proc{}
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		own, ch, ppid, err := procTimes(e.Name())
		if err == nil {
			procs[e.Name()] = proc{own + ch, ppid}
		}
	}
	self := strconv.Itoa(os.Getpid())
	in := map[string]bool{self: true}
	// Descendants: walk each process's parents up to self (depth bounded).
	var sum float64
	for pid, p := range procs {
		cur, ok := pid, false
		for range 32 {
			if in[cur] {
				ok = true
				break
			}
			q, found := procs[cur]
			if !found || q.ppid == "0" {
				break
			}
			cur = q.ppid
		}
		if ok {
			sum += p.cpu
		}
	}
	return sum
}
