// Command xdpnf compares dropping a flood of small UDP packets from a
// blocklisted source with tokenwire's XDP filter (native and generic mode)
// and with netfilter: an iptables raw PREROUTING DROP rule (legacy and nft
// backends) and nftables drop rules at the netdev ingress hook and at ip
// prerouting (priority raw). Two references frame them: "none" (no filter:
// the full receive path up to the UDP stack) and "xdp-drop-all" (a native
// XDP program that drops every frame unread: the earliest drop there is).
// Variants run interleaved, repeated, in one run; medians are reported.
//
// Topology (created and removed by this program; nothing else is touched):
//
//	netns twb-snd: twb-s 198.51.100.1/24  <-- veth -->  netns twb-rcv: twb-r 198.51.100.2/24
//
// What it measures, and why this way. On a veth pair the sender's
// veth_xmit delivers the frame to the peer in the sender's own CPU context
// (netif_rx and the backlog softirq; with native XDP, veth's NAPI), so by
// default the receive path's cost is mixed into the sender's, and a
// sender that costs microseconds per frame (one write(2) per frame in a
// VM) hides it. This program therefore:
//
//   - sends with AF_PACKET, a PACKET_TX_RING (TPACKET_V2) of pre-built
//     60-byte frames and PACKET_QDISC_BYPASS: hundreds of frames per
//     sendto(2), a few hundred ns per frame; frames the veth cannot queue
//     (ENOBUFS) are retried, so a slower receiver stays saturated;
//   - measures the receive path's CPU on two receive paths (-rx), each
//     variant's drops taken from its own counter and checked against the
//     frames sent:
//   - napi: GRO and threaded NAPI on the receiving end (and TSO off on the
//     sending end, or veth_xmit skips its NAPI for AF_PACKET skbs), the
//     NAPI thread pinned to its own CPU (-rx-cpu): the whole receive path
//     runs in that kernel thread, apart from the sender (-send-cpus), as a
//     NIC's NAPI poll would; its CPU is the thread's exact run time
//     (/proc/<pid>/schedstat);
//   - inline: veth's default, the receive runs as a softirq on the
//     sender's CPU; its CPU is that CPU's softirq time in /proc/stat
//     (tick-sampled without CONFIG_IRQ_TIME_ACCOUNTING).
//
// The equal-CPU comparison is packets dropped per second of receive CPU.
// Two references frame the filters: "none" and "xdp-drop-all", the
// cheapest drop the receive path allows.
//
// Needs root, iproute2, iptables and nftables (apt-get install iptables
// nftables). Example:
//
//	go build -o /tmp/xdpnf ./bench/xdpnf && /tmp/xdpnf -duration 3s -repeats 3 -outdir /tmp
//
// Run with -h for the flags (CPUs, batch size, variants, receive paths).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	duration = flag.Duration("duration", 3*time.Second, "flood time per variant and repeat")
	repeats  = flag.Int("repeats", 3, "repeats; the variant order rotates each repeat")
	variants = flag.String("variants", strings.Join(allVariants, ","), "comma-separated variants")
	outDir   = flag.String("outdir", "bench/results", "where xdp-netfilter.csv and xdp-netfilter.md go")
	txMode   = flag.String("tx", "ring", "sender: ring (PACKET_TX_RING, a batch of frames per syscall) or write (one write(2) per frame)")
	rxModes  = flag.String("rx", "napi,inline", "receive paths to run, comma-separated: napi (GRO + threaded NAPI on its own CPU, receive CPU from that thread) and/or inline (veth default: receive in the sender's context, receive CPU from the softirq time of the sender's CPUs)")
	sendCPUs = flag.String("send-cpus", strconv.Itoa(runtime.NumCPU()-1), "comma-separated CPUs, one sender thread pinned to each")
	rxCPU    = flag.Int("rx-cpu", 0, "CPU for the receive NAPI thread (-rx napi)")
	batch    = flag.Int("batch", 256, "frames per sendto(2) with -tx ring")
	settle   = flag.Duration("settle", 100*time.Millisecond, "pause after installing a variant, before the flood")
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\nXDP vs netfilter drop rate and receive CPU over a veth pair (root).\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	// Subcommands are this program re-executed inside a namespace.
	if len(os.Args) > 1 {
		var err error
		switch os.Args[1] {
		case "send":
			err = runSend(os.Args[2:])
		case "xdp":
			err = runXDP(os.Args[2:])
		default:
			goto orchestrate
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, os.Args[1]+":", err)
			os.Exit(1)
		}
		return
	}
orchestrate:
	flag.Parse()
	if err := orchestrate(); err != nil {
		fmt.Fprintln(os.Stderr, "xdpnf:", err)
		os.Exit(1)
	}
}

// children are the processes we started and have not reaped: a signal
// kills them before the namespaces go.
var children struct {
	sync.Mutex
	m map[*exec.Cmd]bool
}

func track(c *exec.Cmd, alive bool) {
	children.Lock()
	defer children.Unlock()
	if children.m == nil {
		children.m = map[*exec.Cmd]bool{}
	}
	if alive {
		children.m[c] = true
	} else {
		delete(children.m, c)
	}
}

var cleanupOnce sync.Once

// cleanup ends our children (by pid) and deletes our namespaces, which
// removes the veth pair, every rule and every program attached to it.
func cleanup() {
	cleanupOnce.Do(func() {
		children.Lock()
		var procs []*os.Process
		for c := range children.m {
			if c.Process != nil {
				c.Process.Kill()
				procs = append(procs, c.Process)
			}
		}
		children.Unlock()
		// Reap them (bounded), so none is left as a zombie when we exit;
		// the goroutine that started one may be waiting for it too, and
		// one of the two Waits then just fails.
		done := make(chan struct{})
		go func() {
			for _, p := range procs {
				p.Wait()
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		teardown()
	})
}

func orchestrate() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root")
	}
	modes := strings.Split(*rxModes, ",")
	for _, m := range modes {
		if m != "napi" && m != "inline" {
			return fmt.Errorf("-rx %q: napi, inline or both", *rxModes)
		}
	}
	vs := strings.Split(*variants, ",")
	for _, v := range vs {
		if !contains(allVariants, v) {
			return fmt.Errorf("unknown variant %q (known: %s)", v, strings.Join(allVariants, ","))
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, bin := range []string{"ip", "iptables-legacy", "iptables-nft", "nft"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (apt-get install iproute2 iptables nftables)", bin)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		s := <-sig
		fmt.Fprintf(os.Stderr, "xdpnf: %v: cleaning up\n", s)
		cleanup()
		os.Exit(1)
	}()
	defer cleanup()

	sendCPUList, err := parseCPUs(*sendCPUs)
	if err != nil {
		return err
	}
	ksoft := ksoftirqdPIDs()
	loadBefore = loadavg()
	var rows []result
	for _, mode := range modes {
		// A fresh pair per receive path: nothing of one mode's settings
		// carries over into the other.
		t, err := setup(rxPath{napi: mode == "napi", rxCPU: *rxCPU})
		if err != nil {
			return err
		}
		for rep := range *repeats {
			for k := range vs {
				v := vs[(k+rep)%len(vs)]
				r, err := runOne(self, t, ksoft, sendCPUList, v)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", mode, v, err)
				}
				r.Repeat, r.RxPath = rep+1, mode
				rows = append(rows, r)
				d := r.derive()
				fmt.Fprintf(os.Stderr, "xdpnf: %-6s repeat %d %-20s sent %7.0f/s dropped %7.0f/s (%.3f of sent) sender %.2f cores %4.0f ns/pkt, receive %.2f cores %4.0f ns/pkt\n",
					mode, r.Repeat, v, d.sentPPS, d.dropPPS, d.dropFrac, d.senderCores, d.senderNs, d.rxCores, d.rxNs)
			}
		}
		teardown()
	}
	return write(rows, modes, vs)
}

// parseCPUs parses a comma-separated CPU list.
func parseCPUs(s string) ([]int, error) {
	var out []int
	for _, c := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 0 || n >= runtime.NumCPU() {
			return nil, fmt.Errorf("CPU list %q: %q is not a CPU of this machine", s, c)
		}
		out = append(out, n)
	}
	return out, nil
}

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
}

func runOne(self string, t *topo, ksoft, sendCPUList []int, variant string) (result, error) {
	r := result{Variant: variant}
	inst, err := install(self, variant, track)
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
	if err := cmd.Start(); err != nil {
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
	fmt.Fprintln(stdin, "go")
	var sr sendResult
	derr := json.NewDecoder(br).Decode(&sr)
	if werr := cmd.Wait(); werr != nil || derr != nil {
		return r, fmt.Errorf("sender: %v %v", werr, derr)
	}
	// Let the receiver finish what is queued (a few hundred frames) before
	// reading its CPU time and the counters.
	time.Sleep(50 * time.Millisecond)
	c1, err := snapshot(t.napiPID, ksoft)
	if err != nil {
		return r, err
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
