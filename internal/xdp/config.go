package xdp

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// Attach modes accepted in Config.Mode.
const (
	// ModeAuto tries native (driver) mode and falls back to generic.
	ModeAuto = "auto"
	// ModeNative attaches in the driver's receive path; it fails on
	// interfaces whose driver has no XDP support.
	ModeNative = "native"
	// ModeGeneric runs the program on the socket buffer, after the driver:
	// slower, but it works on every interface.
	ModeGeneric = "generic"
)

// Defaults for the zero values of Config (see also DefaultMinPrefixLen4
// and DefaultMinPrefixLen6).
const (
	DefaultCapacity      = 65536
	DefaultWatchInterval = time.Second
	// MaxCapacity bounds Capacity4 and Capacity6: the tables are arrays
	// allocated whole at Open (20 and 45 bytes per unit of capacity,
	// rounded up to a power of two, twice during a reload; the IPv4 length
	// index stops growing at 256 KiB), so a capacity of 2^20 already takes
	// 16.25 MiB (IPv4) and 45 MiB (IPv6).
	MaxCapacity = 1 << 20
	// DefaultMaxFileBytes bounds the blocklist file: a full list of
	// 65,536 IPv4 and 65,536 IPv6 prefixes, one per line, is under 4 MiB,
	// so 64 MiB leaves room for comments while refusing a file given by
	// mistake (a log, a disk image) before it is read into memory.
	DefaultMaxFileBytes = 64 << 20
)

// Config says where to attach the filter and what to block.
type Config struct {
	// Interfaces to attach to, by name, in the calling thread's network
	// namespace. At least one.
	Interfaces []string
	// Mode is ModeAuto (also ""), ModeNative or ModeGeneric.
	Mode string
	// Blocklist holds CIDRs or bare addresses (a bare address is a /32 or
	// /128), IPv4 or IPv6.
	Blocklist []string
	// BlocklistFile, when set, names a file with one CIDR or address per
	// line, '#' starting a comment. Its entries are blocked in addition to
	// Blocklist and the file is re-read when it changes. A changed file is
	// applied once it has stayed the same (size, times, inode and SHA-256
	// of its content) for one WatchInterval, so a file that is still being
	// written is not applied half-way; see EndMarker for writers that
	// pause.
	BlocklistFile string
	// EndMarker, when set, is a comment line (starting with '#') that must
	// be the last non-blank line of BlocklistFile: a file without it is
	// incomplete and refused (counted as FailureIncomplete), at start and
	// on reload. Use it when the file is written by something that can
	// pause longer than WatchInterval (a download piped into the file).
	EndMarker string
	// MaxFileBytes refuses a larger BlocklistFile (counted as
	// FailureTooLarge) without reading it; DefaultMaxFileBytes when 0.
	MaxFileBytes int64
	// Allowlist holds CIDRs or addresses that the blocklist never drops:
	// a source in both lists passes, counted as ReasonAllowlist, whatever
	// the prefix lengths. Malformed frames are dropped whatever their
	// source. It is set at Open and does not change.
	Allowlist []string
	// Capacity4 and Capacity6 bound the IPv4 and IPv6 blocklists in
	// distinct prefixes (DefaultCapacity when 0, at most MaxCapacity). A
	// blocklist that does not fit is refused as a whole, never truncated.
	// Each family's table takes 20 (IPv4) or 45 (IPv6) bytes of kernel
	// memory per unit of capacity, rounded up to a power of two, from
	// Open on (1.25 and 2.8 MiB at the default), twice during a reload.
	Capacity4, Capacity6 uint32
	// MinPrefixLen4 and MinPrefixLen6 refuse blocklist prefixes wider
	// than /MinPrefixLen4 (IPv4) or /MinPrefixLen6 (IPv6), wherever they
	// come from (DefaultMinPrefixLen4 and DefaultMinPrefixLen6 when 0; 1
	// allows every length but /0). The allowlist has no minimum.
	MinPrefixLen4, MinPrefixLen6 int
	// PermitBlockAll allows 0.0.0.0/0 and ::/0 in the blocklist, which
	// are refused without it whatever the minimum lengths: blocking every
	// source must be meant (for example, default-deny with an Allowlist of
	// the sources that may reach the node).
	PermitBlockAll bool
	// WatchInterval is how often BlocklistFile is checked for changes
	// (DefaultWatchInterval when 0); negative turns watching off.
	WatchInterval time.Duration
	// OnReload, when set, is called after every reload that the file
	// watcher attempts, with its error (nil: the new list is in force and
	// no program reads the old one any more; otherwise a *ReloadError,
	// FailureOf gives its reason). A file still settling is not a reload
	// attempt. It runs on the watcher's goroutine and must not call Close.
	OnReload func(error)
	// Logger receives attach decisions, reload errors and detach problems
	// (zap.NewNop when nil).
	Logger *zap.Logger
}

// Validate reports every invalid field, each error naming it as the
// receiver's configuration does (xdp.<key> there). Blocklist entries are
// checked against the prefix policy. It does not read BlocklistFile.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Interfaces) == 0 {
		errs = append(errs, errors.New("interfaces: name at least one interface"))
	}
	seen := map[string]bool{}
	for i, name := range c.Interfaces {
		switch {
		case name == "":
			errs = append(errs, fmt.Errorf("interfaces[%d]: empty name", i))
		case seen[name]:
			errs = append(errs, fmt.Errorf("interfaces[%d]: %q is listed twice", i, name))
		}
		seen[name] = true
	}
	switch c.Mode {
	case "", ModeAuto, ModeNative, ModeGeneric:
	default:
		errs = append(errs, fmt.Errorf("mode: %q is not one of auto, native, generic", c.Mode))
	}
	if c.MinPrefixLen4 < 0 || c.MinPrefixLen4 > 32 {
		errs = append(errs, fmt.Errorf("min_prefix_len_ipv4: %d is not between 1 and 32 (0: the default, %d)", c.MinPrefixLen4, DefaultMinPrefixLen4))
	}
	if c.MinPrefixLen6 < 0 || c.MinPrefixLen6 > 128 {
		errs = append(errs, fmt.Errorf("min_prefix_len_ipv6: %d is not between 1 and 128 (0: the default, %d)", c.MinPrefixLen6, DefaultMinPrefixLen6))
	}
	for _, capacity := range []struct {
		key string
		n   uint32
	}{{"capacity_ipv4", c.Capacity4}, {"capacity_ipv6", c.Capacity6}} {
		if capacity.n > MaxCapacity {
			errs = append(errs, fmt.Errorf("%s: %d is more than %d (the table is allocated whole)", capacity.key, capacity.n, MaxCapacity))
		}
	}
	if c.MaxFileBytes < 0 {
		errs = append(errs, fmt.Errorf("max_file_bytes: %d is negative (0: the default, %d)", c.MaxFileBytes, DefaultMaxFileBytes))
	}
	if c.EndMarker != "" {
		if m := strings.TrimSpace(c.EndMarker); !strings.HasPrefix(m, "#") || m != c.EndMarker || strings.ContainsAny(m, "\r\n") {
			errs = append(errs, fmt.Errorf("end_marker: %q must be one comment line starting with '#', without surrounding blanks, "+
				"so that the file stays a valid blocklist for any reader", c.EndMarker))
		}
		if c.BlocklistFile == "" {
			errs = append(errs, errors.New("end_marker: set, but there is no blocklist_file"))
		}
	}
	if c.MinPrefixLen4 >= 0 && c.MinPrefixLen6 >= 0 {
		if _, err := parseEntries("blocklist", c.Blocklist, c.policy().checkEntry); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := parseEntries("allowlist", c.Allowlist, nil); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Mode == "" {
		c.Mode = ModeAuto
	}
	if c.Capacity4 == 0 {
		c.Capacity4 = DefaultCapacity
	}
	if c.Capacity6 == 0 {
		c.Capacity6 = DefaultCapacity
	}
	if c.WatchInterval == 0 {
		c.WatchInterval = DefaultWatchInterval
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}
