package xdp

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":               "192.0.2.7/32",
		"192.0.2.0/24":            "192.0.2.0/24",
		"192.0.2.7/24":            "192.0.2.0/24", // host bits cleared
		"0.0.0.0/0":               "0.0.0.0/0",
		"2001:db8::1":             "2001:db8::1/128",
		"2001:db8::/32":           "2001:db8::/32",
		"2001:db8:ffff::1/33":     "2001:db8:8000::/33",
		"::ffff:198.51.100.9":     "198.51.100.9/32", // IPv4-mapped: the IPv4 entry
		"::ffff:198.51.100.0/120": "198.51.100.0/24",
		"::ffff:0:0/95":           "::fffe:0:0/95", // shorter than the mapped range: stays IPv6
	} {
		got, err := ParsePrefix(in)
		if err != nil || got.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "192.0.2", "192.0.2.0/33", "2001:db8::/129", "fe80::1%eth0",
		"192.0.2.0/", "/24", "example.com", "192.0.2.1-192.0.2.9", "192.0.2.0/24/8"} {
		if p, err := ParsePrefix(in); err == nil {
			t.Errorf("ParsePrefix(%q) = %v, want an error", in, p)
		}
	}
}

func TestParseBlocklist(t *testing.T) {
	const file = `# tokenwire blocklist
203.0.113.0/24

  198.51.100.7   # a bare address, with a comment
2001:db8:bad::/48	# tab before the comment
#192.0.2.0/24 commented out
`
	got, err := ParseBlocklist(strings.NewReader(file), "list.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("203.0.113.0/24"),
		netip.MustParsePrefix("198.51.100.7/32"),
		netip.MustParsePrefix("2001:db8:bad::/48"),
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %v, want %v", i, got[i], want[i])
		}
	}
}

func TestParseBlocklistErrorsNameFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blocklist.txt")
	content := "192.0.2.0/24\n# fine\n192.0.2.300\n\n2001:db8::/129 # too long\n198.51.100.1\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(path)
	if err == nil {
		t.Fatal("no error for two bad lines")
	}
	for _, want := range []string{path + ":3: invalid address \"192.0.2.300\"", path + ":5: invalid CIDR \"2001:db8::/129\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), ":1:") || strings.Contains(err.Error(), ":6:") {
		t.Errorf("error %q names a good line", err)
	}

	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing.txt")); err == nil ||
		!strings.Contains(err.Error(), "missing.txt") {
		t.Errorf("missing file: error %v does not name it", err)
	}
}

func TestParseBlocklistBoundsItsErrors(t *testing.T) {
	_, err := ParseBlocklist(strings.NewReader(strings.Repeat("junk\n", 1000)), "big")
	if err == nil || !strings.Contains(err.Error(), "990 more bad lines") || strings.Count(err.Error(), "\n") > maxLineErrors+1 {
		t.Errorf("error for 1000 bad lines: %v", err)
	}
}

func TestParseCIDRsNamesTheEntry(t *testing.T) {
	_, err := ParseCIDRs([]string{"192.0.2.1", "nope", " 2001:db8::1 "})
	if err == nil || !strings.Contains(err.Error(), `blocklist[1]: invalid address "nope"`) {
		t.Errorf("error %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Interfaces: []string{"eth0"}, Blocklist: []string{"192.0.2.0/24"}}
	if err := good.Validate(); err != nil {
		t.Errorf("valid config: %v", err)
	}
	bad := Config{Interfaces: []string{"eth0", "eth0", ""}, Mode: "offload", Blocklist: []string{"x"}}
	err := bad.Validate()
	for _, want := range []string{`interfaces[1]: "eth0" is listed twice`, "interfaces[2]: empty name",
		`mode: "offload"`, "blocklist[0]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
	if err := (&Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "interfaces") {
		t.Errorf("no interfaces: %v", err)
	}
}

func TestNormalize(t *testing.T) {
	v4, v6 := normalize([]netip.Prefix{
		netip.MustParsePrefix("192.0.2.7/24"),
		netip.MustParsePrefix("192.0.2.0/24"),
		netip.MustParsePrefix("::ffff:192.0.2.1/128"),
		netip.MustParsePrefix("2001:db8::1/32"),
		netip.MustParsePrefix("2001:db8::/32"),
		{},
	})
	if len(v4) != 2 || v4[0].String() != "192.0.2.0/24" || v4[1].String() != "192.0.2.1/32" {
		t.Errorf("v4 %v", v4)
	}
	if len(v6) != 1 || v6[0].String() != "2001:db8::/32" {
		t.Errorf("v6 %v", v6)
	}
}
