package xdp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		cfg    Config
		prefix string
		want   string // "" when accepted, else a part of the error
	}{
		{Config{}, "10.0.0.0/8", ""},
		{Config{}, "10.0.0.0/7", "10.0.0.0/7 is wider than /8, the shortest IPv4 prefix allowed (min_prefix_len_ipv4)"},
		{Config{}, "2001:db8::/32", ""},
		{Config{}, "2001:d00::/24", "2001:d00::/24 is wider than /32, the shortest IPv6 prefix allowed (min_prefix_len_ipv6)"},
		{Config{}, "0.0.0.0/0", "0.0.0.0/0 blocks every IPv4 source; refused unless permit_block_all is set"},
		{Config{}, "::/0", "::/0 blocks every IPv6 source"},
		// An IPv4-mapped entry is the IPv4 prefix it maps, and checked as one.
		{Config{}, "::ffff:10.0.0.0/100", "::ffff:10.0.0.0/100 (0.0.0.0/4) is wider than /8"},
		{Config{}, "::ffff:0.0.0.0/96", "::ffff:0.0.0.0/96 (0.0.0.0/0) blocks every IPv4 source"},
		{Config{}, "10.1.2.3/7", "10.1.2.3/7 (10.0.0.0/7) is wider than /8"},
		{Config{MinPrefixLen4: 4}, "10.0.0.0/4", ""},
		{Config{MinPrefixLen4: 1}, "0.0.0.0/1", ""},
		// The minimum never lets /0 through; the switch does, whatever the minimum.
		{Config{MinPrefixLen4: 1, MinPrefixLen6: 1}, "0.0.0.0/0", "permit_block_all"},
		{Config{PermitBlockAll: true}, "0.0.0.0/0", ""},
		{Config{PermitBlockAll: true}, "::/0", ""},
		{Config{PermitBlockAll: true}, "10.0.0.0/7", "wider than /8"},
		{Config{MinPrefixLen6: 64}, "2001:db8::/48", "wider than /64"},
	} {
		p, err := ParsePrefix(tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		err = tc.cfg.policy().checkEntry(tc.prefix, p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %s refused: %v", tc.cfg, tc.prefix, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %s: error %v, want one containing %q", tc.cfg, tc.prefix, err, tc.want)
		}
	}
}

func TestConfigValidatesThePolicy(t *testing.T) {
	base := func() Config { return Config{Interfaces: []string{"eth0"}} }
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want []string // parts of the error; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"wide entries named by index", func(c *Config) {
			c.Blocklist = []string{"192.0.2.0/24", "10.0.0.0/6", "::/0"}
		}, []string{"blocklist[1]: 10.0.0.0/6 (8.0.0.0/6) is wider than /8", "blocklist[2]: ::/0 blocks every IPv6 source"}},
		{"block all opted in", func(c *Config) { c.Blocklist, c.PermitBlockAll = []string{"0.0.0.0/0", "::/0"}, true }, nil},
		{"lowered minimum", func(c *Config) { c.Blocklist, c.MinPrefixLen4 = []string{"10.0.0.0/6"}, 6 }, nil},
		{"the allowlist has no minimum", func(c *Config) { c.Allowlist = []string{"0.0.0.0/0", "::/0"} }, nil},
		{"bad allowlist entry", func(c *Config) { c.Allowlist = []string{"192.0.2.1", "nope"} }, []string{`allowlist[1]: invalid address "nope"`}},
		{"minimums out of range", func(c *Config) { c.MinPrefixLen4, c.MinPrefixLen6 = 33, -1 }, []string{
			"min_prefix_len_ipv4: 33 is not between 1 and 32", "min_prefix_len_ipv6: -1 is not between 1 and 128"}},
		{"negative max_file_bytes", func(c *Config) { c.MaxFileBytes = -1 }, []string{"max_file_bytes: -1 is negative"}},
		{"capacities too large", func(c *Config) { c.Capacity4, c.Capacity6 = MaxCapacity+1, 1<<24 }, []string{
			"capacity_ipv4: 1048577 is more than 1048576", "capacity_ipv6: 16777216 is more than 1048576"}},
		{"largest capacities", func(c *Config) { c.Capacity4, c.Capacity6 = MaxCapacity, MaxCapacity }, nil},
		{"end marker not a comment", func(c *Config) { c.BlocklistFile, c.EndMarker = "/x", "END" }, []string{`end_marker: "END" must be one comment line`}},
		{"end marker with blanks", func(c *Config) { c.BlocklistFile, c.EndMarker = "/x", "# end " }, []string{"end_marker"}},
		{"end marker without a file", func(c *Config) { c.EndMarker = "# end" }, []string{"end_marker: set, but there is no blocklist_file"}},
		{"end marker", func(c *Config) { c.BlocklistFile, c.EndMarker = "/x", "# end of blocklist" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(&c)
			err := c.Validate()
			if len(tc.want) == 0 && err != nil {
				t.Errorf("valid config refused: %v", err)
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not contain %q", err, w)
				}
			}
		})
	}
}

// TestReloadRefusesWidePrefixes: Reload applies the policy too; a refused
// list changes nothing and is counted.
func TestReloadRefusesWidePrefixes(t *testing.T) {
	f, inst := loadInstance(t, []string{"203.0.113.0/24"})
	before := blocklistInKernel(t, f)
	err := f.Reload(prefixes("198.51.100.0/24", "10.0.0.0/7", "::/0"))
	if FailureOf(err) != FailurePolicy || !strings.Contains(err.Error(), "10.0.0.0/7 is wider than /8") {
		t.Errorf("Reload: %v", err)
	}
	if got := blocklistInKernel(t, f); !slices.Equal(got, before) {
		t.Errorf("the kernel tables changed to %v", got)
	}
	expect(t, inst, "old list in force", ether(etIPv4, nil, ipv4(netip.MustParseAddr("203.0.113.1"), dst4, 0, 10)), ActionDrop, ReasonBlocklist)
	expect(t, inst, "refused list not in force", ether(etIPv4, nil, ipv4(netip.MustParseAddr("198.51.100.1"), dst4, 0, 10)), ActionPass, ReasonNone)
	if st := f.Stats(); st.ReloadErrorsByReason[FailurePolicy] != 1 || st.ReloadErrors != 1 || st.Reloads != 0 {
		t.Errorf("Stats() = %+v", st)
	}
	if _, err := newFilter(Config{Blocklist: []string{"0.0.0.0/0"}}); err == nil || !strings.Contains(err.Error(), "blocklist[0]: 0.0.0.0/0") {
		t.Errorf("a config blocking everything loaded: %v", err)
	}
}

// TestBlockAllWithAllowlist: the use PermitBlockAll exists for,
// default-deny with an allowlist.
func TestBlockAllWithAllowlist(t *testing.T) {
	_, inst := loadInstanceCfg(t, Config{
		Blocklist: []string{"0.0.0.0/0", "::/0"}, PermitBlockAll: true,
		Allowlist: []string{"192.0.2.0/24", "2001:db8::/64"},
	})
	for _, tc := range []frameCase{
		allowed("ipv4 allowlisted", ether(etIPv4, nil, ipv4(src4OK, dst4, 0, 10))),
		blocked("ipv4 anything else", ether(etIPv4, nil, ipv4(src4Blocked, dst4, 0, 10))),
		allowed("ipv6 allowlisted", ether(etIPv6, nil, ipv6(src6OK, dst6, 10))),
		blocked("ipv6 anything else", ether(etIPv6, nil, ipv6(src6Blocked, dst6, 10))),
		pass("arp", ether(etARP, nil, arp(src4Blocked, dst4))),
	} {
		expect(t, inst, tc.name, tc.frame, tc.action, tc.reason)
	}
}
