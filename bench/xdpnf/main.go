// Command xdpnf compares dropping a flood of small UDP packets from a
// blocklisted source with tokenwire's XDP filter (native and generic mode),
// with the LPM-trie filter it replaced (xdp-lpm) and with netfilter:
// iptables raw PREROUTING with one DROP rule per prefix (legacy and nft
// backends: a linear chain) or one rule matching an ipset hash:net set,
// nftables with an interval set or a single rule at the netdev ingress
// hook and at ip prerouting (priority raw). Each list variant runs with
// blocklists of every -entries size. Two references frame them: "none"
// (no filter: the full receive path up to the UDP stack) and
// "xdp-drop-all" (a native XDP program that drops every frame unread).
// Variants run interleaved, repeated, in one run; medians are reported,
// with the range of the receive cost.
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
//     (/proc/<pid>/schedstat), reported with the packets per NAPI run and
//     what else ran on that CPU;
//   - inline: veth's default, the receive runs as a softirq on the
//     sender's CPU; its CPU is that CPU's softirq time in /proc/stat
//     (tick-sampled without CONFIG_IRQ_TIME_ACCOUNTING).
//
// The receive CPU per packet includes whatever slows the receive thread
// down: other processes on its CPU (cache and TLB misses after every
// preemption, interrupts counted in its run time) move a whole run from
// about 700 to 1,100-1,500 ns per packet on this VM whatever the variant.
// Hence the interleaving, the min-max column, and -bpf-stats, which adds
// the XDP programs' own run time (kernel.bpf_stats_enabled, restored after
// the run).
//
// Needs root, iproute2, iptables, ipset and nftables (apt-get install
// iptables ipset nftables). Runs are bounded (-max-runtime refuses longer
// plans; each flood is -duration); the namespaces, and with them every
// rule, set and program, are removed on exit and on SIGINT, SIGTERM and
// SIGHUP. Examples:
//
//	go build -o /tmp/xdpnf ./bench/xdpnf && /tmp/xdpnf -duration 3s -repeats 3 -outdir /tmp
//	/tmp/xdpnf -rx napi -entries 1,10000,65536 -variants xdp-native,xdp-lpm,iptables-legacy-raw,iptables-ipset,nft-set-ingress,nft-set-prerouting -duration 2s -outdir /tmp
//
// Run with -h for the flags (CPUs, batch size, variants, sizes, receive
// paths).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

var (
	duration = flag.Duration("duration", 3*time.Second, "flood time per variant and repeat")
	repeats  = flag.Int("repeats", 3, "repeats; the variant order rotates each repeat")
	variants = flag.String("variants", strings.Join(defaultVariants, ","), "comma-separated variants (known: "+strings.Join(allVariants, ",")+")")
	entries  = flag.String("entries", "1", "comma-separated blocklist sizes; each list variant runs with each (none, xdp-drop-all, nft-ingress and nft-prerouting with 1 only)")
	bpfStats = flag.Bool("bpf-stats", false, "turn kernel.bpf_stats_enabled on for the run (restored after) and report the XDP programs' own run time; it adds two clock reads to every XDP run")
	maxRun   = flag.Duration("max-runtime", 10*time.Minute, "refuse a plan whose estimated run time is longer")
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
	benchutil.Main("xdpnf", orchestrate, map[string]func([]string) error{"send": runSend, "xdp": runXDP})
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
	sizes, err := parseSizes(*entries)
	if err != nil {
		return err
	}
	runs := 0
	for _, n := range sizes {
		for _, v := range vs {
			if runsWith(v, n) {
				runs++
			}
		}
	}
	runs *= *repeats * len(modes)
	// Per run: the flood, the settle time and about 1.5 s of setup and
	// teardown (2 s more for a list of 65,536 in iptables or nft).
	estimate := time.Duration(runs) * (*duration + *settle + 2*time.Second)
	if estimate > *maxRun {
		return fmt.Errorf("%d runs, about %v: more than -max-runtime %v; fewer variants, sizes or repeats, or raise it", runs, estimate.Round(time.Second), *maxRun)
	}
	fmt.Fprintf(os.Stderr, "xdpnf: %d runs, about %v\n", runs, estimate.Round(time.Second))
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, bin := range []string{"ip", "iptables-legacy", "iptables-nft", "nft", "ipset"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not installed (apt-get install iproute2 iptables nftables ipset)", bin)
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
	if *bpfStats {
		if err := enableBPFStats(); err != nil {
			return fmt.Errorf("-bpf-stats: %w", err)
		}
	}

	sendCPUList, err := parseCPUs(*sendCPUs)
	if err != nil {
		return err
	}
	if results, err = benchutil.OpenResults(*outDir, "xdpnf"); err != nil {
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
			for _, n := range sizes {
				for k := range vs {
					v := vs[(k+rep)%len(vs)]
					if !runsWith(v, n) {
						continue
					}
					r, err := runOne(self, t, ksoft, sendCPUList, v, n)
					if err != nil {
						return fmt.Errorf("%s, %s, %d entries: %w", mode, v, n, err)
					}
					r.Repeat, r.RxPath = rep+1, mode
					rows = append(rows, r)
					d := r.derive()
					fmt.Fprintf(os.Stderr, "xdpnf: %-6s repeat %d %-19s %6d entries: sent %7.0f/s dropped %.3f of sent; sender %.2f cores %4.0f ns/pkt; receive %.2f cores %4.0f ns/pkt, %5.1f pkts per NAPI run, rx CPU steal %.2f, others %.2f; program %s\n",
						mode, r.Repeat, v, n, d.sentPPS, d.dropFrac, d.senderCores, d.senderNs, d.rxCores, d.rxNs, d.pktsPerRun, d.rxSteal, d.rxOthers, progCell(d))
				}
			}
		}
		teardown()
	}
	return write(rows, modes, vs, sizes)
}

// parseSizes parses the -entries list.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1<<20 {
			return nil, fmt.Errorf("-entries %q: %q is not a size between 1 and %d", s, f, 1<<20)
		}
		out = append(out, n)
	}
	return out, nil
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
