package xdp

import (
	"errors"
	"fmt"
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

// Defaults for the zero values of Config.
const (
	DefaultCapacity      = 65536
	DefaultWatchInterval = time.Second
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
	// Blocklist and the file is re-read when it changes.
	BlocklistFile string
	// Capacity4 and Capacity6 bound the IPv4 and IPv6 blocklists
	// (DefaultCapacity when 0). A blocklist that does not fit is an error.
	Capacity4, Capacity6 uint32
	// WatchInterval is how often BlocklistFile is checked for changes
	// (DefaultWatchInterval when 0); negative turns watching off.
	WatchInterval time.Duration
	// OnReload, when set, is called after every reload that the file
	// watcher attempts, with its error (nil: the new list is in force and
	// no program reads the old one any more). It runs on the watcher's
	// goroutine and must not call Close.
	OnReload func(error)
	// Logger receives attach decisions, reload errors and detach problems
	// (zap.NewNop when nil).
	Logger *zap.Logger
}

// Validate reports every invalid field. It does not read BlocklistFile.
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
	if _, err := ParseCIDRs(c.Blocklist); err != nil {
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
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}
