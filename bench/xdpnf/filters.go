package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/tokenwire/tokenwire/bench/xdpnf/lpmfilter"
	"github.com/tokenwire/tokenwire/internal/childproc"
	"github.com/tokenwire/tokenwire/internal/xdp"
)

// Variants, in the order the report lists them. "none" and "xdp-drop-all"
// are references: the full receive path with no filter (the UDP stack
// then drops the packets for want of a socket), and the earliest drop
// there is (a native XDP program that drops everything without parsing).
// Every other variant drops the sender's address from a blocklist of
// -entries prefixes (benchList): tokenwire's filter (native, generic), the
// LPM-trie filter it replaced (xdp-lpm, native), iptables with one rule
// per prefix in raw PREROUTING (legacy and nft backends: a linear chain),
// iptables with one rule matching an ipset hash:net set, and nftables with
// an interval set at netdev ingress and at ip prerouting (priority raw).
// nft-ingress and nft-prerouting are single rules, so 1 entry only.
var allVariants = []string{
	"none", "xdp-drop-all", "xdp-native", "xdp-generic", "xdp-lpm",
	"iptables-legacy-raw", "iptables-nft-raw", "iptables-ipset",
	"nft-ingress", "nft-prerouting", "nft-set-ingress", "nft-set-prerouting",
}

// defaultVariants run without -variants.
var defaultVariants = []string{
	"none", "xdp-drop-all", "xdp-native", "xdp-generic",
	"iptables-legacy-raw", "iptables-nft-raw", "nft-ingress", "nft-prerouting",
}

// singleRule are the variants that hold one address, not a list.
var singleRule = map[string]bool{"none": true, "xdp-drop-all": true, "nft-ingress": true, "nft-prerouting": true}

// runsWith reports whether variant runs with a list of entries prefixes:
// the references and the single rules only with 1.
func runsWith(variant string, entries int) bool {
	return entries == 1 || !singleRule[variant]
}

const (
	nftTable  = "twbench"
	ipsetName = "twb_bl"
)

// installed is a variant in force: count reads its drop counter and
// removes it (or, for "none", reads the receive counter).
type installed struct {
	count func() (uint64, error)
}

// install puts the variant's drop of a list of entries prefixes in place
// inside twb-rcv. children are recorded with track so that a signal can end
// them.
func install(self, variant string, entries int, track func(*exec.Cmd, bool)) (installed, error) {
	switch variant {
	case "none":
		before, err := readLinkStats(nsRcv, ifRcv)
		if err != nil {
			return installed{}, err
		}
		return installed{func() (uint64, error) {
			after, err := readLinkStats(nsRcv, ifRcv)
			return after.RxPackets - before.RxPackets, err
		}}, nil
	case "xdp-native", "xdp-generic", "xdp-drop-all", "xdp-lpm":
		return startXDPChild(self, variant, entries, track)
	case "iptables-legacy-raw", "iptables-nft-raw", "iptables-ipset":
		return installIptables(variant, entries)
	case "nft-set-ingress", "nft-set-prerouting":
		ingress := variant == "nft-set-ingress"
		family := map[bool]string{true: "netdev", false: "ip"}[ingress]
		return installNft(family, nftSet(benchList(entries), ingress))
	case "nft-ingress", "nft-prerouting":
		family, rules := "ip", fmt.Sprintf(`table ip %s {
  chain pre { type filter hook prerouting priority raw; ip saddr %s counter drop; }
}`, nftTable, ipSnd)
		if variant == "nft-ingress" {
			family, rules = "netdev", fmt.Sprintf(`table netdev %s {
  chain in { type filter hook ingress device "%s" priority -500; ip saddr %s counter drop; }
}`, nftTable, ifRcv, ipSnd)
		}
		return installNft(family, rules+"\n")
	}
	return installed{}, fmt.Errorf("unknown variant %q", variant)
}

// installNft loads an nft script defining table nftTable of family, whose
// rule's counter counts the drops.
func installNft(family, script string) (installed, error) {
	name, err := writeTemp("twb-nft-*.nft", script)
	if err != nil {
		return installed{}, err
	}
	defer os.Remove(name)
	if _, err := inRcv("nft", "-f", name); err != nil {
		return installed{}, err
	}
	return installed{func() (uint64, error) {
		out, err := inRcv("nft", "list", "chain", family, nftTable, map[string]string{"ip": "pre", "netdev": "in"}[family])
		// Removed here; the namespace's deletion would catch a miss.
		inRcv("nft", "delete", "table", family, nftTable)
		if err != nil {
			return 0, err
		}
		m := regexp.MustCompile(`counter packets (\d+)`).FindStringSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("no counter in %q", out)
		}
		return strconv.ParseUint(m[1], 10, 64)
	}}, nil
}

// installIptables puts a list of entries prefixes in raw PREROUTING: one
// DROP rule per prefix (legacy or nft backend), or, for iptables-ipset,
// one rule matching a hash:net set (legacy backend). The drops are the sum
// of the DROP rules' packet counters.
func installIptables(variant string, entries int) (installed, error) {
	list := benchList(entries)
	bin, script := "iptables-legacy", iptablesLinear(list)
	switch variant {
	case "iptables-nft-raw":
		bin = "iptables-nft"
	case "iptables-ipset":
		set, err := writeTemp("twb-ipset-*", ipsetRestore(list))
		if err != nil {
			return installed{}, err
		}
		defer os.Remove(set)
		if _, err := inRcv("ipset", "restore", "-file", set); err != nil {
			return installed{}, err
		}
		script = "*raw\n-A PREROUTING -m set --match-set " + ipsetName + " src -j DROP\nCOMMIT\n"
	}
	name, err := writeTemp("twb-ipt-*", script)
	if err != nil {
		return installed{}, err
	}
	defer os.Remove(name)
	if _, err := inRcv("sh", "-c", bin+"-restore -w < "+name); err != nil {
		return installed{}, err
	}
	return installed{func() (uint64, error) {
		out, err := inRcv(bin, "-w", "-t", "raw", "-L", "PREROUTING", "-v", "-x", "-n")
		// Removed here; the namespace's deletion would catch a miss.
		inRcv(bin, "-w", "-t", "raw", "-F", "PREROUTING")
		if variant == "iptables-ipset" {
			inRcv("ipset", "destroy", ipsetName)
		}
		if err != nil {
			return 0, err
		}
		var n uint64
		found := false
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[2] == "DROP" {
				v, err := strconv.ParseUint(f[0], 10, 64)
				if err != nil {
					return 0, err
				}
				n, found = n+v, true
			}
		}
		if !found {
			return 0, fmt.Errorf("no DROP rule in %q", out)
		}
		return n, nil
	}}, nil
}

// startXDPChild runs "xdpnf xdp" inside twb-rcv: the program stays
// attached while the child lives, and the child prints its drop count when
// told to stop. A child that outlives us is killed (Pdeathsig), which
// closes its link and detaches the program.
func startXDPChild(self, variant string, entries int, track func(*exec.Cmd, bool)) (installed, error) {
	cmd := exec.Command("ip", "netns", "exec", nsRcv, self, "xdp", "-variant", variant, "-entries", strconv.Itoa(entries))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return installed{}, err
	}
	if err := childproc.Start(cmd); err != nil {
		return installed{}, err
	}
	track(cmd, true)
	stop := func() { cmd.Process.Kill(); cmd.Wait(); track(cmd, false) }
	br := bufio.NewReader(out)
	if l, err := br.ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		stop()
		return installed{}, fmt.Errorf("xdp child: %q %v", l, err)
	}
	return installed{func() (uint64, error) {
		defer stop()
		cmd.Process.Signal(syscall.SIGTERM)
		l, err := br.ReadString('\n')
		if err != nil {
			return 0, fmt.Errorf("xdp child: %w", err)
		}
		return strconv.ParseUint(strings.TrimSpace(l), 10, 64)
	}}, nil
}

// runXDP is the "xdp" subcommand, run inside twb-rcv: it attaches the
// variant's program to twb-r, prints "ready", and on SIGTERM (or after a
// bound of 10 minutes) prints the number of packets it dropped and exits,
// which detaches the program.
func runXDP(args []string) error {
	fs := flag.NewFlagSet("xdp", flag.ExitOnError)
	variant := fs.String("variant", "xdp-native", "xdp-native, xdp-generic (tokenwire's filter), xdp-lpm (the LPM-trie filter it replaced) or xdp-drop-all")
	entries := fs.Int("entries", 1, "blocklist size")
	fs.Parse(args)
	list := benchList(*entries)
	var drops func() (uint64, error)
	switch *variant {
	case "xdp-native", "xdp-generic":
		mode := strings.TrimPrefix(*variant, "xdp-")
		cidrs := make([]string, len(list))
		for i, p := range list {
			cidrs[i] = p.String()
		}
		capacity := uint32(max(*entries, xdp.DefaultCapacity))
		f, err := xdp.Open(xdp.Config{Interfaces: []string{ifRcv}, Mode: mode, Blocklist: cidrs,
			Capacity4: capacity, WatchInterval: -1})
		if err != nil {
			return err
		}
		defer f.Close()
		drops = func() (uint64, error) {
			cs, err := f.Counters()
			var n uint64
			for _, c := range cs {
				if c.Action == xdp.ActionDrop {
					n += c.Packets
				}
			}
			return n, err
		}
	case "xdp-lpm":
		f, err := lpmfilter.Load(uint32(max(*entries, xdp.DefaultCapacity)))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := f.Fill(list); err != nil {
			return err
		}
		if err := f.Attach(ifRcv); err != nil {
			return err
		}
		drops = f.Drops
	case "xdp-drop-all":
		d, closeFn, err := attachDropAll(ifRcv)
		if err != nil {
			return err
		}
		defer closeFn()
		drops = d
	default:
		return fmt.Errorf("unknown XDP variant %q", *variant)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sig:
	case <-time.After(10 * time.Minute):
	}
	n, err := drops()
	if err != nil {
		return err
	}
	fmt.Println(n)
	return nil
}

// attachDropAll attaches, in native mode, the cheapest useful XDP program:
// it counts the frame in a per-CPU array and returns XDP_DROP, without
// looking at it. It is the floor of any drop in the receive path.
func attachDropAll(ifname string) (drops func() (uint64, error), closeFn func(), err error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, nil, err
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "twb_dropall_n", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return nil, nil, err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "twb_xdp_dropall", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{
			asm.StoreImm(asm.R10, -4, 0, asm.Word), // key 0
			asm.Mov.Reg(asm.R2, asm.R10),
			asm.Add.Imm(asm.R2, -4),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "out"),
			asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
			asm.Add.Imm(asm.R1, 1),
			asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord), // per-CPU: no atomic needed
			asm.Mov.Imm(asm.R0, 1).WithSymbol("out"),   // XDP_DROP
			asm.Return(),
		},
	})
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifi.Index, Flags: link.XDPDriverMode})
	if err != nil {
		prog.Close()
		m.Close()
		return nil, nil, fmt.Errorf("attaching drop-all XDP to %s: %w", ifname, err)
	}
	return func() (uint64, error) {
			var per []uint64
			if err := m.Lookup(uint32(0), &per); err != nil {
				return 0, err
			}
			var n uint64
			for _, v := range per {
				n += v
			}
			return n, nil
		}, func() {
			l.Close()
			prog.Close()
			m.Close()
		}, nil
}
