package main

import (
	"fmt"
	"strings"
)

// markdown is the report: how it was measured, a table per receive path
// and blocklist size, and what the numbers can and cannot show.
func markdown(rows []result, modes, vs []string, sizes []int) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	sz := make([]string, len(sizes))
	for i, n := range sizes {
		sz[i] = fmt.Sprint(n)
	}
	p("## 5. XDP vs netfilter\n\n")
	p("Command: `xdpnf -duration %v -repeats %d -tx %s -rx %s -send-cpus %s -rx-cpu %d -batch %d -variants %s -entries %s -bpf-stats=%v`. ",
		*duration, *repeats, *txMode, strings.Join(modes, ","), *sendCPUs, *rxCPU, *batch, strings.Join(vs, ","), strings.Join(sz, ","), *bpfStats)
	p("A veth pair between two namespaces; the sender floods 60-byte IPv4/UDP frames from the blocklisted %s for %v per variant; %d repeats, variants interleaved (order rotates), medians. ", ipSnd, *duration, *repeats)
	if *txMode == "ring" {
		p("**Sender**: AF_PACKET with a PACKET_TX_RING (TPACKET_V2) of pre-built frames and PACKET_QDISC_BYPASS, up to %d frames per `sendto`, one thread pinned to CPU %s; frames the veth cannot queue (ENOBUFS: the receiver is behind) are retried, so the receiver is kept busy. ", *batch, *sendCPUs)
	} else {
		p("**Sender**: AF_PACKET, one `write` per frame, one thread pinned to CPU %s. ", *sendCPUs)
	}
	p("Variants: `none` (no filter: the full path up to the UDP stack, which drops for want of a socket), `xdp-drop-all` (a native XDP program that drops every frame unread), tokenwire's filter in native and generic mode (`xdp-native`, `xdp-generic`), the LPM-trie filter it replaced (`xdp-lpm`, native), iptables raw PREROUTING with one DROP rule per prefix (legacy and nft backends: a linear chain, the matching rule last), iptables with one rule matching an ipset `hash:net` set (`iptables-ipset`), nftables with an interval set at netdev ingress and at ip prerouting, priority raw (`nft-set-*`), and single nftables rules (`nft-ingress`, `nft-prerouting`, 1 entry only). ")
	p("A list of N entries is the sender's /32 and N-1 random prefixes, mostly /24 and /32.\n\n")
	p("Load average (1 min) before and after the run: %s and %s on 2 cores: other processes make the rates noisy.\n\n", loadBefore, loadAfter)
	p("The equal-CPU comparison is **dropped per receive CPU-s** (= 1e9 / receive ns per packet); the ratios divide it by the iptables variants'. **Read it together with packets per NAPI run** (napi path): see the note after the tables.\n\n")
	for _, mode := range modes {
		var rs []result
		for _, r := range rows {
			if r.RxPath == mode {
				rs = append(rs, r)
			}
		}
		med := medians(rs)
		if mode == "napi" {
			p("### Receive path on its own core (threaded NAPI)\n\n")
			p("GRO and threaded NAPI on twb-r (and TSO off on twb-s, without which veth_xmit bypasses its NAPI for AF_PACKET skbs), the NAPI thread pinned to CPU %d: the whole receive path runs in one kernel thread on its own core, as a NIC's NAPI poll does. Receive CPU = that thread's exact run time (`/proc/<pid>/schedstat`), *pkts per NAPI run* = packets dropped / times the thread was scheduled in.\n\n", *rxCPU)
		} else {
			p("### veth's default path (receive in the sender's context)\n\n")
			p("No GRO, no threaded NAPI: the receive runs as a softirq on the sender's CPU, inside its `sendto`. Receive CPU = the softirq time of the sender's CPU in `/proc/stat`, tick-sampled (250 Hz, about %d samples per flood): an estimate. Sender CPU = the sender thread's run time minus it.\n\n", int(duration.Seconds()*250))
		}
		for _, n := range sizes {
			p("#### Blocklist of %d entries\n\n", n)
			table(&b, med, vs, n)
			p("\n")
			if n == 1 {
				verdict(&b, med)
				p("\n")
			}
		}
	}
	p("%s\n", explanation(rows, modes))
	p("\nColumns: *dropped / sent* checks the counters (XDP program counters, iptables/nft rule counters; for `none`, twb-r's rx_packets): 1.000 means every frame the sender handed to the veth was dropped by the variant. *refused by veth* are frames the veth's queue had no room for (twb-s tx_dropped), retried by the sender. *program* is the XDP program's own run time per packet (kernel.bpf_stats_enabled, with -bpf-stats). Raw per-run data: `bench/results/xdp-netfilter.csv`.\n\n")
	return b.String()
}

func table(b *strings.Builder, med map[key]derived, vs []string, n int) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("| variant | sent pkt/s | dropped / sent | refused by veth pkt/s | sender cores | receive cores | sender ns/pkt | receive ns/pkt | receive ns/pkt min-max | pkts per NAPI run | rx CPU: others, steal | program ns/pkt | dropped per receive CPU-s | vs iptables-legacy-raw | vs iptables-ipset |\n")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	ratio := func(v, ref string) string {
		d, r := med[key{v, n}], med[key{ref, n}]
		if r.dropPerRxCPUs <= 0 || d.dropPerRxCPUs <= 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", d.dropPerRxCPUs/r.dropPerRxCPUs)
	}
	for _, v := range vs {
		d, ok := med[key{v, n}]
		if !ok {
			continue
		}
		batch := "n/a"
		if d.pktsPerRun > 0 {
			batch = fmt.Sprintf("%.1f", d.pktsPerRun)
		}
		p("| %s | %.0f | %.3f | %.0f | %.2f | %.2f | %.0f | %.0f | %.0f-%.0f | %s | %.2f, %.2f | %s | %.0f | %s | %s |\n",
			v, d.sentPPS, d.dropFrac, d.vethDropPPS, d.senderCores, d.rxCores, d.senderNs, d.rxNs, d.rxNsMin, d.rxNsMax,
			batch, d.rxOthers, d.rxSteal, strings.TrimSuffix(progCell(d), " ns/pkt"), d.dropPerRxCPUs, ratio(v, "iptables-legacy-raw"), ratio(v, "iptables-ipset"))
	}
}

// verdict states whether XDP drops 3x the packets of iptables at equal CPU.
func verdict(b *strings.Builder, med map[key]derived) {
	eff := func(d derived) float64 { return d.dropPerRxCPUs }
	bestX, bestXName := 0.0, ""
	for _, v := range []string{"xdp-native", "xdp-generic"} {
		if d, ok := med[key{v, 1}]; ok && eff(d) > bestX {
			bestX, bestXName = eff(d), v
		}
	}
	if bestX == 0 {
		return
	}
	var parts []string
	met := true
	for _, ipt := range []string{"iptables-legacy-raw", "iptables-nft-raw"} {
		d, ok := med[key{ipt, 1}]
		if !ok || eff(d) <= 0 {
			continue
		}
		x := bestX / eff(d)
		if x < 3 {
			met = false
			parts = append(parts, fmt.Sprintf("%.2fx %s (%.0f%% short of 3x)", x, ipt, (1-x/3)*100))
		} else {
			parts = append(parts, fmt.Sprintf("%.2fx %s", x, ipt))
		}
	}
	if len(parts) == 0 {
		return
	}
	word := "**met**"
	if !met {
		word = "**missed**"
	}
	fmt.Fprintf(b, "Target (XDP drops at least 3x the packets/s of iptables at equal CPU, one entry): %s. The better XDP mode here, %s, drops %s.\n", word, bestXName, strings.Join(parts, " and "))
}

// explanation says what the numbers can and cannot show on a veth pair.
func explanation(rows []result, modes []string) string {
	s := "**What veth can and cannot show.** The frame reaches twb-r as an skb that the sender's AF_PACKET socket already allocated and filled. " +
		"On a NIC with a native XDP driver, XDP runs on the raw DMA buffer before any skb exists and XDP_DROP just recycles the page, " +
		"while netfilter needs the skb allocated, the headers parsed (GRO, ip_rcv) and then freed. " +
		"On veth every variant, XDP included, pays for an skb (native XDP on veth even copies it into a page-pool page first), so XDP can save only the stack it skips, never the skb.\n\n" +
		"**Receive CPU per packet is not the filter's cost when the receiver is not saturated.** On the napi path the NAPI thread uses less than a core: it drains the ring, sleeps, and is woken again by veth_xmit (on the sender's CPU). " +
		"Each sleep and wakeup costs a few microseconds of the thread's CPU (and an IPI and a wakeup on the sender's side), spread over the packets of one run: a receiver that keeps up polls small batches and pays that cost often. " +
		"The receive ns per packet therefore falls with the packets per NAPI run, whatever the program does, and two runs of the same variant can land on either side (see min-max). " +
		"Compare variants at similar packets per NAPI run, or by the program's own time (BPF_PROG_TEST_RUN, or -bpf-stats here)."
	for _, mode := range modes {
		if mode != "napi" {
			continue
		}
		var rs []result
		for _, r := range rows {
			if r.RxPath == mode && (r.Variant == "xdp-drop-all" || r.Variant == "xdp-native") && r.Entries == 1 && r.NapiRuns > 0 {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		s += " In this run (one entry), per repeat:"
		for _, r := range rs {
			d := r.derive()
			s += fmt.Sprintf(" %s %.0f ns/pkt at %.1f pkts/run (program %s);", r.Variant, d.rxNs, d.pktsPerRun, progCell(d))
		}
		s = strings.TrimSuffix(s, ";") + "."
	}
	return s
}
