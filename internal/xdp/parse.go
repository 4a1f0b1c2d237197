package xdp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
)

// ParsePrefix parses one blocklist entry: a CIDR ("192.0.2.0/24",
// "2001:db8::/32") or a bare address (a /32 or /128). Host bits are
// cleared ("192.0.2.7/24" blocks 192.0.2.0/24). IPv4-mapped IPv6 entries
// (::ffff:192.0.2.1) become the IPv4 entry they map, because that is how
// the packets arrive. Zones (fe80::1%eth0) are refused: the filter sees
// addresses, not scopes.
func ParsePrefix(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("invalid CIDR %q: %w", s, err)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("invalid address %q: %w", s, err)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("invalid address %q: zones are not supported", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// ParseCIDRs parses blocklist entries from configuration. An error names
// each bad entry by its index ("blocklist[2]: ..."), all bad entries at
// once.
func ParseCIDRs(entries []string) ([]netip.Prefix, error) {
	return parseEntries("blocklist", entries, nil)
}

// entryCheck refuses an entry (written as text) that parses to a prefix
// that may not be used; nil accepts everything.
type entryCheck func(text string, p netip.Prefix) error

// parseEntries parses configuration entries; key names the list in
// errors ("allowlist[1]: ...").
func parseEntries(key string, entries []string, check entryCheck) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(entries))
	var errs []error
	for i, e := range entries {
		e = strings.TrimSpace(e)
		p, err := ParsePrefix(e)
		if err == nil && check != nil {
			err = check(e, p)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: %w", key, i, err))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// maxLineErrors bounds how many bad lines one error reports, so that a
// binary file given by mistake does not make a megabyte of error text.
const maxLineErrors = 10

// ParseBlocklist reads a blocklist: one CIDR or address per line, blank
// lines ignored, '#' starting a comment that runs to the end of the line.
// name is used in errors, which give the name and line of each bad entry
// ("blocklist.txt:3: invalid CIDR ...").
func ParseBlocklist(r io.Reader, name string) ([]netip.Prefix, error) {
	res := parseLines(r, name, nil)
	return res.prefixes, errors.Join(append(res.parseErrs, res.policyErrs...)...)
}

// parsed is what parseLines found: the good entries, the lines that are
// not entries, the entries check refused, and the last non-blank line
// (for the end marker).
type parsed struct {
	prefixes   []netip.Prefix
	parseErrs  []error
	policyErrs []error
	lastLine   string
}

// parseLines is ParseBlocklist with a check of each entry (nil: none).
// Each kind of error is bounded to maxLineErrors lines plus a count.
func parseLines(r io.Reader, name string, check entryCheck) parsed {
	var (
		res           parsed
		nParse, nPols int
	)
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		raw := strings.TrimSpace(sc.Text())
		if raw != "" {
			res.lastLine = raw
		}
		text := raw
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = strings.TrimSpace(text[:i])
		}
		if text == "" {
			continue
		}
		p, err := ParsePrefix(text)
		if err != nil {
			if nParse++; nParse <= maxLineErrors {
				res.parseErrs = append(res.parseErrs, fmt.Errorf("%s:%d: %w", name, line, err))
			}
			continue
		}
		if check != nil {
			if err := check(text, p); err != nil {
				if nPols++; nPols <= maxLineErrors {
					res.policyErrs = append(res.policyErrs, fmt.Errorf("%s:%d: %w", name, line, err))
				}
				continue
			}
		}
		res.prefixes = append(res.prefixes, p)
	}
	if err := sc.Err(); err != nil {
		res.parseErrs = append(res.parseErrs, fmt.Errorf("%s: %w", name, err))
	}
	if nParse > maxLineErrors {
		res.parseErrs = append(res.parseErrs, fmt.Errorf("%s: %d more bad lines", name, nParse-maxLineErrors))
	}
	if nPols > maxLineErrors {
		res.policyErrs = append(res.policyErrs, fmt.Errorf("%s: %d more refused prefixes", name, nPols-maxLineErrors))
	}
	return res
}

// ParseFile reads the blocklist file at path (see ParseBlocklist).
func ParseFile(path string) ([]netip.Prefix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("blocklist file: %w", err)
	}
	defer f.Close()
	return ParseBlocklist(f, path)
}
