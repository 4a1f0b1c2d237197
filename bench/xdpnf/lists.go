package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
)

// benchList returns the blocklist of n entries every list variant loads:
// the sender's address (/32, so that the flood matches) and n-1 random
// prefixes with a blocklist's usual lengths (mostly /24 and /32, some
// /16, /20, /22, /28), none of which overlaps the benchmark's own
// 198.51.100.0/24. The same n gives the same list in every variant.
func benchList(n int) []netip.Prefix {
	r := rand.New(rand.NewPCG(uint64(n), 2026))
	own := netip.MustParsePrefix("198.51.100.0/24")
	lens := []int{24, 24, 24, 24, 24, 24, 24, 24, 24, 32, 32, 32, 32, 32, 32, 32, 16, 20, 22, 28}
	seen := map[netip.Prefix]bool{}
	out := make([]netip.Prefix, 0, n)
	for len(out) < n-1 {
		a := netip.AddrFrom4([4]byte{byte(1 + r.IntN(223)), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())})
		p := netip.PrefixFrom(a, lens[r.IntN(len(lens))]).Masked()
		if seen[p] || p.Overlaps(own) {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return append(out, netip.MustParsePrefix(ipSnd+"/32"))
}

// writeTemp writes content to a temporary file and returns its name; the
// caller removes it.
func writeTemp(pattern, content string) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", err
	}
	_, werr := f.WriteString(content)
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		os.Remove(f.Name())
		return "", werr
	}
	return f.Name(), nil
}

// iptablesLinear is an iptables-restore input with one raw PREROUTING DROP
// rule per prefix, the sender's last: every flood packet walks the whole
// chain, as a packet that matches nothing does.
func iptablesLinear(list []netip.Prefix) string {
	var b strings.Builder
	b.WriteString("*raw\n")
	for _, p := range list {
		fmt.Fprintf(&b, "-A PREROUTING -s %s -j DROP\n", p)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// ipsetRestore is an `ipset restore` input: a hash:net set of the list.
func ipsetRestore(list []netip.Prefix) string {
	var b strings.Builder
	fmt.Fprintf(&b, "create %s hash:net family inet hashsize %d maxelem %d\n", ipsetName, max(1024, len(list)), max(65536, 2*len(list)))
	for _, p := range list {
		fmt.Fprintf(&b, "add %s %s\n", ipsetName, p)
	}
	return b.String()
}

// nftSet is an nft script: a table with an interval set of the list
// (auto-merge: the random prefixes may overlap) and one rule dropping
// sources in it, at the netdev ingress hook or at ip prerouting (priority
// raw).
func nftSet(list []netip.Prefix, ingress bool) string {
	var b strings.Builder
	family, chain := "ip", "chain pre { type filter hook prerouting priority raw; ip saddr @bl counter drop; }"
	if ingress {
		family = "netdev"
		chain = fmt.Sprintf(`chain in { type filter hook ingress device "%s" priority -500; ip saddr @bl counter drop; }`, ifRcv)
	}
	fmt.Fprintf(&b, "table %s %s {\n  set bl { type ipv4_addr; flags interval; auto-merge; elements = {\n", family, nftTable)
	for i, p := range list {
		sep := ","
		if i == len(list)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %s%s\n", p, sep)
	}
	fmt.Fprintf(&b, "  } }\n  %s\n}\n", chain)
	return b.String()
}
