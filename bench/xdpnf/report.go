package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// derived are one run's rates and per-packet costs.
type derived struct {
	sentPPS, dropPPS, vethDropPPS float64
	dropFrac                      float64 // dropped / sent: 1 when the counter saw every frame
	senderCores, rxCores          float64
	ksoftCores, softirqCores      float64
	senderNs                      float64 // sender CPU per frame sent
	rxNs                          float64 // receive CPU per dropped packet
	totalNs                       float64 // all measured CPU per dropped packet
	dropPerRxCPUs                 float64 // packets dropped per second of receive CPU
	dropPerTotalCPUs              float64 // packets dropped per second of all measured CPU
	pktsPerRun                    float64 // packets per NAPI thread run (napi): the receive batch
	rxSteal                       float64 // share of the flood the hypervisor stole from the rx CPU (napi)
	rxOthers                      float64 // cores of the rx CPU used by others than the NAPI thread (napi, tick-sampled)
	progNs                        float64 // the XDP program's own run time per run (-bpf-stats); 0: not measured
	rxNsMin, rxNsMax              float64 // receive ns/pkt over the repeats (medians only)
}

// progCell formats the program's own time per packet, or n/a.
func progCell(d derived) string {
	if d.progNs <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f ns/pkt", d.progNs)
}

// key identifies a variant at a blocklist size.
type key struct {
	variant string
	entries int
}

func (r result) derive() derived {
	var d derived
	if r.Seconds <= 0 {
		return d
	}
	// The receive path's CPU: exact (the NAPI thread) on the napi path;
	// on the inline path the softirq time of the sender's CPUs, where
	// veth_xmit's netif_rx (or veth's NAPI, with native XDP) runs it.
	total := float64(r.SenderCPUNs + r.NapiCPUNs + r.KsoftirqdNs)
	rx := float64(r.NapiCPUNs)
	sender := float64(r.SenderCPUNs)
	if r.RxPath == "inline" {
		// The sender thread's run time holds the softirqs it ran; ksoftirqd's
		// is softirq time too. The tick-sampled softirq time can exceed
		// both (sampling error, or softirqs run in another task's
		// context): then the split is an estimate and the sender gets 0.
		rx = float64(r.SendCPUSoftirqJiffies) * 1e9 / userHZ
		sender = max(total-rx, 0)
		total = sender + rx
	}
	d.sentPPS = float64(r.Sent) / r.Seconds
	d.dropPPS = float64(r.Dropped) / r.Seconds
	d.vethDropPPS = float64(r.VethDropped) / r.Seconds
	d.dropFrac = float64(r.Dropped) / max(float64(r.Sent), 1)
	d.senderCores = sender / 1e9 / r.Seconds
	d.rxCores = rx / 1e9 / r.Seconds
	d.ksoftCores = float64(r.KsoftirqdNs) / 1e9 / r.Seconds
	d.softirqCores = r.SoftirqCores
	d.senderNs = sender / max(float64(r.Sent), 1)
	d.rxNs = rx / max(float64(r.Dropped), 1)
	d.totalNs = total / max(float64(r.Dropped), 1)
	if rx > 0 {
		d.dropPerRxCPUs = float64(r.Dropped) / (rx / 1e9)
	}
	if total > 0 {
		d.dropPerTotalCPUs = float64(r.Dropped) / (total / 1e9)
	}
	if r.NapiRuns > 0 {
		d.pktsPerRun = float64(r.Dropped) / float64(r.NapiRuns)
	}
	d.rxSteal = float64(r.RxStealJiffies) / userHZ / r.Seconds
	if r.RxPath == "napi" {
		d.rxOthers = max(float64(r.RxBusyJiffies)/userHZ/r.Seconds-d.rxCores, 0)
	}
	if r.ProgRuns > 0 {
		d.progNs = float64(r.ProgNs) / float64(r.ProgRuns)
	}
	return d
}

// medians of every derived quantity per variant and size, over repeats,
// with the range of the receive cost.
func medians(rows []result) map[key]derived {
	by := map[key][]derived{}
	for _, r := range rows {
		k := key{r.Variant, r.Entries}
		by[k] = append(by[k], r.derive())
	}
	out := map[key]derived{}
	for v, ds := range by {
		med := func(f func(derived) float64) float64 {
			xs := make([]float64, len(ds))
			for i, d := range ds {
				xs[i] = f(d)
			}
			return benchutil.Median(xs)
		}
		out[v] = derived{
			sentPPS:          med(func(d derived) float64 { return d.sentPPS }),
			dropPPS:          med(func(d derived) float64 { return d.dropPPS }),
			vethDropPPS:      med(func(d derived) float64 { return d.vethDropPPS }),
			dropFrac:         med(func(d derived) float64 { return d.dropFrac }),
			senderCores:      med(func(d derived) float64 { return d.senderCores }),
			rxCores:          med(func(d derived) float64 { return d.rxCores }),
			ksoftCores:       med(func(d derived) float64 { return d.ksoftCores }),
			softirqCores:     med(func(d derived) float64 { return d.softirqCores }),
			senderNs:         med(func(d derived) float64 { return d.senderNs }),
			rxNs:             med(func(d derived) float64 { return d.rxNs }),
			totalNs:          med(func(d derived) float64 { return d.totalNs }),
			dropPerRxCPUs:    med(func(d derived) float64 { return d.dropPerRxCPUs }),
			dropPerTotalCPUs: med(func(d derived) float64 { return d.dropPerTotalCPUs }),
			pktsPerRun:       med(func(d derived) float64 { return d.pktsPerRun }),
			rxSteal:          med(func(d derived) float64 { return d.rxSteal }),
			rxOthers:         med(func(d derived) float64 { return d.rxOthers }),
			progNs:           med(func(d derived) float64 { return d.progNs }),
			rxNsMin:          ds[0].rxNs,
			rxNsMax:          ds[0].rxNs,
		}
		m := out[v]
		for _, d := range ds {
			m.rxNsMin, m.rxNsMax = min(m.rxNsMin, d.rxNs), max(m.rxNsMax, d.rxNs)
		}
		out[v] = m
	}
	return out
}

// write writes the raw rows (xdp-netfilter.csv, with the run id, for the
// report to compute from) and prints the markdown summary.
func write(rows []result, modes, vs []string, sizes []int) error {
	res := results
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	var recs [][]string
	for _, r := range rows {
		recs = append(recs, []string{strconv.Itoa(r.Repeat), r.RxPath, r.Variant, *txMode, fmt.Sprintf("%.3f", r.Seconds), u(r.Sent), u(r.VethDropped), u(r.Dropped),
			u(r.SenderCPUNs), u(r.NapiCPUNs), u(r.KsoftirqdNs), u(r.SendCPUSoftirqJiffies), fmt.Sprintf("%.3f", r.SoftirqCores), u(r.Syscalls),
			strconv.Itoa(r.Entries), u(r.NapiRuns), u(r.ProgRuns), u(r.ProgNs), u(r.RxStealJiffies), u(r.RxBusyJiffies)})
	}
	if err := res.WriteCSV("xdp-netfilter.csv", []string{"repeat", "rx_path", "variant", "tx", "seconds", "sent", "veth_dropped", "dropped",
		"sender_thread_ns", "napi_thread_ns", "ksoftirqd_ns", "sender_cpus_softirq_jiffies", "softirq_cores_all", "send_syscalls",
		"entries", "napi_thread_runs", "prog_runs", "prog_ns", "rx_cpu_steal_jiffies", "rx_cpu_busy_jiffies"}, recs); err != nil {
		return err
	}
	loadAfter = loadavg()
	fmt.Print(markdown(rows, modes, vs, sizes))
	return res.WriteMeta(map[string]string{"duration": duration.String(), "repeats": strconv.Itoa(*repeats), "tx": *txMode,
		"rx": strings.Join(modes, ","), "send_cpus": *sendCPUs, "rx_cpu": strconv.Itoa(*rxCPU), "batch": strconv.Itoa(*batch),
		"bpf_stats": strconv.FormatBool(*bpfStats), "user_hz": strconv.Itoa(userHZ), "src": ipSnd})
}

// results is opened when the run starts (its host sampler covers the run).
var results *benchutil.Results

// loadBefore and loadAfter are the 1-minute load averages around the run.
var loadBefore, loadAfter string

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
