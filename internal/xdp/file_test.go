package xdp

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// fileFilter loads a filter reading the blocklist file (written with
// content first), without a watcher, and one instance.
func fileFilter(t *testing.T, content string, cfg Config) (*Filter, *instance, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "blocklist.txt")
	writeAtomic(t, path, content)
	cfg.BlocklistFile = path
	f, inst := loadInstanceCfg(t, cfg)
	if err := f.loadFile(); err != nil {
		t.Fatal(err)
	}
	return f, inst, path
}

// writeAtomic replaces path with content the careful way: temp + rename.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// mustParseAll parses entries (both families) and returns them normalized
// as the kernel tables hold them.
func mustParseAll(t *testing.T, entries ...string) []netip.Prefix {
	t.Helper()
	ps, err := ParseCIDRs(entries)
	if err != nil {
		t.Fatal(err)
	}
	v4, v6 := normalize(ps)
	return append(v4, v6...)
}

// TestReloadFileRefusals: every way a file can be refused leaves the
// kernel tables as they were, names the file (and the line, for a bad
// entry), and is counted under its reason.
func TestReloadFileRefusals(t *testing.T) {
	const good = "203.0.113.0/24\n2001:db8:bad::/48\n"
	f, inst, path := fileFilter(t, good, Config{Capacity4: 4, Capacity6: 4, MaxFileBytes: 256})
	inForce := mustParseAll(t, "203.0.113.0/24", "2001:db8:bad::/48")
	if got := blocklistInKernel(t, f); !slices.Equal(got, inForce) {
		t.Fatalf("loaded %v", got)
	}
	var over []string
	for i := range 5 {
		over = append(over, fmt.Sprintf("198.51.100.%d", i))
	}
	for _, tc := range []struct {
		name, content string
		reason        FailureReason
		want          string
	}{
		{"wide prefix", "203.0.113.0/24\n# fine\n10.0.0.0/7 # oops\n", FailurePolicy,
			path + ":3: 10.0.0.0/7 is wider than /8, the shortest IPv4 prefix allowed (min_prefix_len_ipv4)"},
		{"block all", "0.0.0.0/0\n", FailurePolicy, path + ":1: 0.0.0.0/0 blocks every IPv4 source"},
		{"bad line", "203.0.113.0/24\nbogus\n10.0.0.0/7\n", FailureParse, path + `:2: invalid address "bogus"`},
		{"over capacity", strings.Join(over, "\n") + "\n", FailureCapacity,
			path + ": with the configured entries, the blocklist has 5 distinct IPv4 prefixes, more than the capacity of 4 (capacity_ipv4); " +
				"the list is refused as a whole, not truncated"},
		{"too large", strings.Repeat("# padding\n", 30), FailureTooLarge, path + ": 300 bytes, more than max_file_bytes (256)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.Stats().ReloadErrorsByReason[tc.reason]
			writeAtomic(t, path, tc.content)
			err := f.ReloadFile()
			if FailureOf(err) != tc.reason || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReloadFile: %v\nwant reason %s and %q", err, tc.reason, tc.want)
			}
			if got := blocklistInKernel(t, f); !slices.Equal(got, inForce) {
				t.Errorf("the kernel tables changed to %v", got)
			}
			expect(t, inst, "old list in force", ether(etIPv4, nil, ipv4(netip.MustParseAddr("203.0.113.1"), dst4, 0, 10)), ActionDrop, ReasonBlocklist)
			if got := f.Stats().ReloadErrorsByReason[tc.reason]; got != before+1 {
				t.Errorf("%s failures: %d, want %d", tc.reason, got, before+1)
			}
		})
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := f.ReloadFile(); FailureOf(err) != FailureRead {
		t.Errorf("missing file: %v", err)
	}
	st := f.Stats()
	if st.Reloads != 0 || st.ReloadErrors != 6 || st.ReloadErrorsByReason[FailureRead] != 1 {
		t.Errorf("Stats() = %+v", st)
	}
}

// TestFileRefusedAtStart: the same checks at start fail Open with the file
// and line, before any interface is looked at (the interface named does
// not exist, so a wrong success could not attach anything either).
func TestFileRefusedAtStart(t *testing.T) {
	// Open creates the table maps before it reads the file: it needs BPF,
	// and on 5.10, where maps count against RLIMIT_MEMLOCK, the raised
	// limit that bpftest.Require sets (the test ran only after another
	// test of the process had set it).
	bpftest.Require(t)
	path := filepath.Join(t.TempDir(), "blocklist.txt")
	writeAtomic(t, path, "192.0.2.0/24\n\n2001:db8::/16\n")
	_, err := Open(Config{Interfaces: []string{"tw-none0"}, BlocklistFile: path})
	if err == nil || !strings.Contains(err.Error(), path+":3: 2001:db8::/16 (2001::/16) is wider than /32") {
		t.Errorf("Open: %v", err)
	}
	writeAtomic(t, path, "192.0.2.0/24\n")
	_, err = Open(Config{Interfaces: []string{"tw-none0"}, BlocklistFile: path, EndMarker: "# end"})
	if FailureOf(err) != FailureIncomplete || !strings.Contains(err.Error(), `does not end with the end marker line "# end"`) {
		t.Errorf("Open without the end marker: %v", err)
	}
}

func TestEndMarker(t *testing.T) {
	f, inst, path := fileFilter(t, "203.0.113.0/24\n# end\n", Config{EndMarker: "# end"})
	from := func(s string) []byte { return ether(etIPv4, nil, ipv4(netip.MustParseAddr(s), dst4, 0, 10)) }
	expect(t, inst, "loaded", from("203.0.113.1"), ActionDrop, ReasonBlocklist)
	for _, content := range []string{
		"198.51.100.0/24\n",                      // no marker (yet)
		"198.51.100.0/24\n# end\n192.0.2.0/25\n", // something after it
		"198.51.100.0/24\n# end of list\n",       // not the marker
		"198.51.100.0/24\n# en",                  // cut inside it
	} {
		writeAtomic(t, path, content)
		if err := f.ReloadFile(); FailureOf(err) != FailureIncomplete {
			t.Errorf("%q: %v", content, err)
		}
	}
	expect(t, inst, "old list kept", from("203.0.113.1"), ActionDrop, ReasonBlocklist)
	writeAtomic(t, path, "198.51.100.0/24\n  # end  \n\n")
	if err := f.ReloadFile(); err != nil {
		t.Fatalf("complete file: %v", err)
	}
	expect(t, inst, "new list", from("198.51.100.1"), ActionDrop, ReasonBlocklist)
	expect(t, inst, "old entry gone", from("203.0.113.1"), ActionPass, ReasonNone)
	if st := f.Stats(); st.Reloads != 1 || st.ReloadErrorsByReason[FailureIncomplete] != 4 {
		t.Errorf("Stats() = %+v", st)
	}
}
