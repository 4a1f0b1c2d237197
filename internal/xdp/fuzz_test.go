package xdp

import (
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// randomFrames is how many pseudo-random frames FuzzClassify adds to its
// seed corpus, so that a plain `go test` runs them through the kernel and
// the reference too. `go test -fuzz FuzzClassify` then mutates from there.
const randomFrames = 2000

// Addresses at and around the edges of testBlocklist, for randomFrame.
var (
	edgeSources4 = addrs("203.0.113.0", "203.0.113.255", "203.0.112.255", "203.0.114.0",
		"198.51.100.7", "198.51.100.6", "198.51.100.8", "198.51.100.9",
		"192.0.2.127", "192.0.2.128", "192.0.2.255", "192.0.2.1", "0.0.0.0", "255.255.255.255",
		"203.0.113.199", "203.0.113.200", "203.0.113.207", "203.0.113.208",
		"198.51.100.63", "198.51.100.64", "198.51.100.79", "198.51.100.80", "198.51.100.127")
	edgeSources6 = addrs("2001:db8:bad::", "2001:db8:bad:ffff:ffff:ffff:ffff:ffff", "2001:db8:bac:ffff::1",
		"2001:db8:bae::", "2001:db8::7", "2001:db8::6", "2001:db8::8", "::ffff:198.51.100.9", "::", "fe80::1",
		"2001:db8:bad:a11::", "2001:db8:bad:a11:ffff:ffff:ffff:ffff", "2001:db8:bad:a10:ffff:ffff:ffff:ffff",
		"2001:db8:c0b::", "2001:db8:c0b:ffff:ffff:ffff:ffff:ffff", "2001:db8:c00::", "2001:db8:cff:ffff::1", "2001:db8:d00::")
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// FuzzClassify is the differential test: every frame goes through the
// kernel program (BPF_PROG_TEST_RUN) and the Go reference classifier, and
// the two must agree on the action and on the counter slot that moved.
//
// Seeds: testdata/fuzz/FuzzClassify (one file per table case, see
// TestSeedCorpusIsCurrent) and randomFrames structured pseudo-random
// frames from a fixed seed.
func FuzzClassify(f *testing.F) {
	flt, inst := loadInstanceCfg(f, testConfig())
	ref := referenceLists(f, flt)
	r := rand.New(rand.NewPCG(4, 2026))
	for range randomFrames {
		f.Add(randomFrame(r, edgeSources4, edgeSources6))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < 14 {
			// BPF_PROG_TEST_RUN refuses XDP input shorter than an
			// Ethernet header; a NIC never delivers one either.
			return
		}
		if len(frame) > maxTestFrame {
			frame = frame[:maxTestFrame]
		}
		action, reason := referenceClassify(frame, ref)
		got, delta := runFrame(t, inst, frame)
		if msg := verdictErr(frame, got, delta, action, reason); msg != "" {
			t.Fatalf("kernel and reference disagree on the %d-byte frame\n% x\n%s", len(frame), frame, msg)
		}
	})
}

const corpusDir = "testdata/fuzz/FuzzClassify"

// TestSeedCorpusIsCurrent checks that the committed seed corpus holds every
// table case that is not a mere truncation (header-boundary truncations
// included). With TOKENWIRE_UPDATE_CORPUS=1 it rewrites the corpus instead.
func TestSeedCorpusIsCurrent(t *testing.T) {
	want := map[string]string{}
	unsafeChars := regexp.MustCompile(`[^a-zA-Z0-9.]+`)
	for _, tc := range frameCases() {
		if strings.Contains(tc.name, " cut to ") && !strings.Contains(tc.name, "boundary") {
			continue
		}
		name := strings.Trim(unsafeChars.ReplaceAllString(tc.name, "_"), "_")
		if _, dup := want[name]; dup {
			t.Fatalf("two cases are named %q", name)
		}
		want[name] = "go test fuzz v1\n[]byte(" + strconv.Quote(string(tc.frame)) + ")\n"
	}
	if os.Getenv("TOKENWIRE_UPDATE_CORPUS") != "" {
		if err := os.MkdirAll(corpusDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range want {
			if err := os.WriteFile(filepath.Join(corpusDir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote %d seed files to %s", len(want), corpusDir)
		return
	}
	for name, content := range want {
		got, err := os.ReadFile(filepath.Join(corpusDir, name))
		if err != nil || string(got) != content {
			t.Errorf("seed %s missing or stale (err %v): run TOKENWIRE_UPDATE_CORPUS=1 go test -run TestSeedCorpusIsCurrent ./internal/xdp", name, err)
		}
	}
}

// TestRandomFramesCoverEveryVerdict guards the generator: if a change made
// it stop producing some verdict, the differential test would silently
// lose that branch.
func TestRandomFramesCoverEveryVerdict(t *testing.T) {
	var ref refLists
	for _, l := range []struct {
		set     *prefixSet
		entries []string
	}{{&ref.block, testBlocklist}, {&ref.allow, testAllowlist}} {
		for _, s := range l.entries {
			p, err := ParsePrefix(s)
			if err != nil {
				t.Fatal(err)
			}
			*l.set = append(*l.set, p)
		}
	}
	r := rand.New(rand.NewPCG(4, 2026))
	seen := map[[2]uint32]int{}
	for range randomFrames {
		a, re := referenceClassify(randomFrame(r, edgeSources4, edgeSources6), ref)
		seen[[2]uint32{uint32(a), uint32(re)}]++
	}
	for _, v := range verdicts {
		if n := seen[[2]uint32{uint32(v.Action), uint32(v.Reason)}]; n < randomFrames/20 {
			t.Errorf("%s/%s: %d of %d random frames, want at least 5%%", v.Action, v.Reason, n, randomFrames)
		}
	}
	t.Logf("verdicts of the random frames: %v", seen)
}
