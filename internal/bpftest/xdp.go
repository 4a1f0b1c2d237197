package bpftest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// Helpers for tests that attach XDP programs inside the namespaces of
// VethPair.

// IP runs `ip -n <ns> args...` and fails the test on error.
func (ns Netns) IP(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip -n %s %s: %v: %s", ns.Name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Link is what `ip -j link show` says about one interface.
type Link struct {
	Name  string `json:"ifname"`
	Index int    `json:"ifindex"`
	MAC   string `json:"address"`
	// XDP is present when a program is attached: one per mode in
	// Attached (with one mode, also in Prog).
	XDP *struct {
		Mode int `json:"mode"`
		Prog *struct {
			ID   int    `json:"id"`
			Name string `json:"name"`
		} `json:"prog"`
		Attached []struct {
			Mode int `json:"mode"`
			Prog *struct {
				ID   int    `json:"id"`
				Name string `json:"name"`
			} `json:"prog"`
		} `json:"attached"`
	} `json:"xdp"`
}

// XDPProgramIDs lists the IDs of the XDP programs attached to the link, as
// iproute2 reports them.
func (l Link) XDPProgramIDs() []int {
	if l.XDP == nil {
		return nil
	}
	// iproute2 lists the program of each mode under "attached" and, when
	// there is one mode only, that program again under "prog".
	var ids []int
	for _, a := range l.XDP.Attached {
		if a.Prog != nil {
			ids = append(ids, a.Prog.ID)
		}
	}
	if len(ids) == 0 && l.XDP.Prog != nil {
		ids = append(ids, l.XDP.Prog.ID)
	}
	return ids
}

// Links lists the interfaces of ns of the given kind ("veth"; "" for all)
// with `ip -d -j link show`.
func (ns Netns) Links(t testing.TB, kind string) []Link {
	t.Helper()
	args := []string{"-d", "-j", "link", "show"}
	if kind != "" {
		args = append(args, "type", kind)
	}
	var links []Link
	if err := json.Unmarshal([]byte(ns.IP(t, args...)), &links); err != nil {
		t.Fatalf("parsing ip -j link show in %s: %v", ns.Name, err)
	}
	return links
}

// Veth returns the veth end that VethPair put in ns.
func (ns Netns) Veth(t testing.TB) Link {
	t.Helper()
	links := ns.Links(t, "veth")
	if len(links) != 1 {
		t.Fatalf("netns %s has %d veth interfaces, want 1: %+v", ns.Name, len(links), links)
	}
	return links[0]
}

// Link returns the interface called name in ns.
func (ns Netns) Link(t testing.TB, name string) Link {
	t.Helper()
	for _, l := range ns.Links(t, "") {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("netns %s has no interface %q", ns.Name, name)
	return Link{}
}
