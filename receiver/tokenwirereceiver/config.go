package tokenwirereceiver

import (
	"errors"
	"fmt"
	"time"

	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/xdp"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// Config is the tokenwire receiver's configuration.
type Config struct {
	// CollectionInterval is how often the receiver emits its metrics.
	CollectionInterval time.Duration `mapstructure:"collection_interval"`
	// HookPreference lists the hook types to try, in order; the first that
	// the kernel accepts is used (fentry, tp_btf, raw_tracepoint,
	// tracepoint, kprobe).
	HookPreference []string `mapstructure:"hook_preference"`
	// RingBufferSize is the size in bytes of each capability's ring buffer
	// (a power of two, at least one page). The default, 4 MiB, is the
	// smallest the record pipeline benchmark found lossless at a million
	// records a second; the ring only has to bridge the reader's wake-up
	// delays, so more buys little.
	RingBufferSize int `mapstructure:"ring_buffer_size"`
	// Handshake configures TCP handshake latency tracking.
	Handshake HandshakeConfig `mapstructure:"handshake"`
	// Streams configures tracking of streamed responses.
	Streams StreamsConfig `mapstructure:"streams"`
	// XDP configures the XDP filter; it is off until interfaces are named.
	XDP XDPConfig `mapstructure:"xdp"`

	metadata.MetricsBuilderConfig `mapstructure:",squash"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// HandshakeConfig configures TCP handshake latency tracking.
type HandshakeConfig struct {
	// Enabled turns the handshake probe on.
	Enabled bool `mapstructure:"enabled"`
	// Required makes Start fail when the handshake probe cannot attach.
	// When false (the default), the receiver logs why, reports
	// otelcol_receiver_tokenwire_capability_up{capability="handshake"} 0
	// and runs the other capabilities without it. Setting it while
	// enabled is false is an error.
	Required bool `mapstructure:"required"`
	// Ports, when set, limits tracking to these server ports. Leave it out
	// to track every TCP handshake on the host.
	Ports []int `mapstructure:"ports"`
	// MaxTrackedSockets bounds the kernel map of client sockets whose
	// handshake is in flight; the least recently used entry is evicted
	// when it is full.
	MaxTrackedSockets int `mapstructure:"max_tracked_sockets"`
}

// XDPConfig configures the XDP filter that drops packets from blocklisted
// sources and malformed frames, counting every decision.
type XDPConfig struct {
	// Interfaces to attach to, by name. Empty: the filter is off.
	Interfaces []string `mapstructure:"interfaces"`
	// Required makes Start fail when the filter cannot attach to every
	// interface. It defaults to true: a filter the user asked for must not
	// be silently missing. Set it to false to run the stream and handshake
	// probes without the filter when it cannot attach (the receiver logs
	// why and reports
	// otelcol_receiver_tokenwire_capability_up{capability="xdp"} 0). It
	// has no effect while interfaces is empty.
	Required bool `mapstructure:"required"`
	// Mode is auto (native where the driver supports it, else generic),
	// native or generic.
	Mode string `mapstructure:"mode"`
	// Blocklist holds CIDRs or addresses (IPv4 or IPv6) to drop.
	Blocklist []string `mapstructure:"blocklist"`
	// BlocklistFile names a file with one CIDR or address per line ('#'
	// comments); a changed file is applied once it has stayed unchanged
	// for one watch_interval. A file that cannot be used is refused whole
	// and the blocklist in force stays.
	BlocklistFile string `mapstructure:"blocklist_file"`
	// EndMarker, when set, is a '#' comment line that must end
	// blocklist_file: a file without it is refused as incomplete (for
	// writers that can pause longer than watch_interval).
	EndMarker string `mapstructure:"end_marker"`
	// MaxFileBytes refuses a larger blocklist_file without reading it.
	MaxFileBytes int64 `mapstructure:"max_file_bytes"`
	// Allowlist holds CIDRs or addresses the blocklist never drops.
	Allowlist []string `mapstructure:"allowlist"`
	// MinPrefixLenIPv4 and MinPrefixLenIPv6 refuse blocklist prefixes
	// wider than these lengths: a /1 meant as a /16 must not cut the node
	// off.
	MinPrefixLenIPv4 int `mapstructure:"min_prefix_len_ipv4"`
	MinPrefixLenIPv6 int `mapstructure:"min_prefix_len_ipv6"`
	// PermitBlockAll allows 0.0.0.0/0 and ::/0 in the blocklist
	// (default-deny with an allowlist).
	PermitBlockAll bool `mapstructure:"permit_block_all"`
	// CapacityIPv4 and CapacityIPv6 bound each blocklist; the kernel
	// tables are allocated whole at start.
	CapacityIPv4 int `mapstructure:"capacity_ipv4"`
	CapacityIPv6 int `mapstructure:"capacity_ipv6"`
	// WatchInterval is how often blocklist_file is checked for changes.
	WatchInterval time.Duration `mapstructure:"watch_interval"`
}

// filter returns the XDP package's configuration for x.
func (x *XDPConfig) filter() xdp.Config {
	return xdp.Config{
		Interfaces:     x.Interfaces,
		Mode:           x.Mode,
		Blocklist:      x.Blocklist,
		BlocklistFile:  x.BlocklistFile,
		EndMarker:      x.EndMarker,
		MaxFileBytes:   x.MaxFileBytes,
		Allowlist:      x.Allowlist,
		MinPrefixLen4:  x.MinPrefixLenIPv4,
		MinPrefixLen6:  x.MinPrefixLenIPv6,
		PermitBlockAll: x.PermitBlockAll,
		Capacity4:      uint32(x.CapacityIPv4),
		Capacity6:      uint32(x.CapacityIPv6),
		WatchInterval:  x.WatchInterval,
	}
}

const pageSize = 4096

// What a request's traceparent does to its span (streams.traceparent).
const (
	TraceParentParent = "parent"
	TraceParentLink   = "link"
	TraceParentIgnore = "ignore"
)

func createDefaultConfig() *Config {
	order := make([]string, len(hook.DefaultOrder))
	for i, k := range hook.DefaultOrder {
		order[i] = string(k)
	}
	return &Config{
		CollectionInterval: 10 * time.Second,
		HookPreference:     order,
		RingBufferSize:     4 << 20,
		Handshake: HandshakeConfig{
			Enabled:           true,
			MaxTrackedSockets: 16384,
		},
		Streams: StreamsConfig{
			Enabled:         true,
			Ports:           []int{8000, 11434, 8080},
			MaxSockets:      16384,
			StateSlots:      stream.DefaultStateSlots,
			Coalesce:        500 * time.Microsecond,
			FlushInterval:   time.Second,
			MaxPaths:        100,
			MaxModels:       100,
			MaxSeries:       2000,
			TraceParent:     TraceParentParent,
			RequestCapture:  DefaultRequestCaptureBytes,
			ResponseDetails: true,
			ClientAddress:   true,
			SeriesExpiry:    15 * time.Minute,
			Spans:           true,
			MaxPendingSpans: DefaultMaxPendingSpans,
			IdleTimeout:     5 * time.Minute,
			TLS:             defaultStreamsTLS(),
			Clients:         StreamsClientsConfig{Enabled: true},
		},
		XDP: XDPConfig{
			Required:      true,
			Mode:          xdp.ModeAuto,
			CapacityIPv4:  xdp.DefaultCapacity,
			CapacityIPv6:  xdp.DefaultCapacity,
			WatchInterval: xdp.DefaultWatchInterval,
			MaxFileBytes:  xdp.DefaultMaxFileBytes,

			MinPrefixLenIPv4: xdp.DefaultMinPrefixLen4,
			MinPrefixLenIPv6: xdp.DefaultMinPrefixLen6,
		},
		MetricsBuilderConfig: metadata.NewDefaultMetricsBuilderConfig(),
	}
}

// Validate reports every invalid field, each error naming its key.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.CollectionInterval <= 0 {
		errs = append(errs, fmt.Errorf("collection_interval: must be positive, got %v", cfg.CollectionInterval))
	}
	if len(cfg.HookPreference) == 0 {
		errs = append(errs, errors.New("hook_preference: must list at least one hook type"))
	}
	seenHook := map[string]bool{}
	for i, h := range cfg.HookPreference {
		if _, err := hook.ParseKind(h); err != nil {
			errs = append(errs, fmt.Errorf("hook_preference[%d]: %w", i, err))
		} else if seenHook[h] {
			errs = append(errs, fmt.Errorf("hook_preference[%d]: %q is listed twice", i, h))
		}
		seenHook[h] = true
	}
	if n := cfg.RingBufferSize; n < pageSize || n&(n-1) != 0 || n > 1<<30 {
		errs = append(errs, fmt.Errorf("ring_buffer_size: must be a power of two between %d and %d bytes, got %d", pageSize, 1<<30, n))
	}
	errs = append(errs, validatePorts("handshake.ports", cfg.Handshake.Ports)...)
	if n := cfg.Handshake.MaxTrackedSockets; n <= 0 || n > 1<<24 {
		errs = append(errs, fmt.Errorf("handshake.max_tracked_sockets: must be between 1 and %d, got %d", 1<<24, n))
	}
	if cfg.Handshake.Required && !cfg.Handshake.Enabled {
		errs = append(errs, errors.New("handshake.required: the handshake probe cannot be required while handshake.enabled is false"))
	}
	if cfg.Streams.Enabled {
		errs = append(errs, cfg.Streams.validate(cfg.CollectionInterval)...)
	} else if cfg.Streams.Required {
		errs = append(errs, errors.New("streams.required: the stream probe cannot be required while streams.enabled is false"))
	}
	errs = append(errs, cfg.XDP.validate()...)
	if !cfg.Handshake.Enabled && !cfg.Streams.Enabled && len(cfg.XDP.Interfaces) == 0 {
		errs = append(errs, errors.New("nothing to do: handshake.enabled and streams.enabled are false and xdp.interfaces is empty"))
	}
	return errors.Join(errs...)
}

// validate checks x the way the filter will at start (the XDP package's
// rules, its keys prefixed with xdp.), plus what only the receiver's
// configuration can get wrong: zero values the package would read as its
// defaults.
func (x *XDPConfig) validate() []error {
	if len(x.Interfaces) == 0 {
		if len(x.Blocklist) > 0 || x.BlocklistFile != "" || len(x.Allowlist) > 0 {
			return []error{errors.New("xdp.interfaces: a blocklist or allowlist is set but no interface to filter on")}
		}
		return nil
	}
	var errs []error
	for i, name := range x.Interfaces {
		if len(name) > 15 {
			errs = append(errs, fmt.Errorf("xdp.interfaces[%d]: %q is not an interface name (at most 15 characters)", i, name))
		}
	}
	for key, n := range map[string]int{"xdp.capacity_ipv4": x.CapacityIPv4, "xdp.capacity_ipv6": x.CapacityIPv6} {
		if n < 1 || n > xdp.MaxCapacity {
			errs = append(errs, fmt.Errorf("%s: must be between 1 and %d, got %d", key, xdp.MaxCapacity, n))
		}
	}
	for key, n := range map[string]int{"xdp.min_prefix_len_ipv4": x.MinPrefixLenIPv4, "xdp.min_prefix_len_ipv6": x.MinPrefixLenIPv6} {
		if n == 0 {
			errs = append(errs, fmt.Errorf("%s: must be at least 1 (0.0.0.0/0 and ::/0 need xdp.permit_block_all)", key))
		}
	}
	if x.WatchInterval <= 0 {
		errs = append(errs, fmt.Errorf("xdp.watch_interval: must be positive, got %v", x.WatchInterval))
	}
	if x.MaxFileBytes == 0 {
		errs = append(errs, errors.New("xdp.max_file_bytes: must be positive"))
	}
	fc := x.filter()
	if err := fc.Validate(); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("xdp.%w", e))
		}
	}
	return errs
}

// unjoin returns the errors joined in err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// validatePorts checks an optional port list: absent is fine (all ports),
// but an explicit empty list, a port outside 1-65535 or a repeat is not.
func validatePorts(key string, ports []int) []error {
	if ports == nil {
		return nil
	}
	if len(ports) == 0 {
		return []error{fmt.Errorf("%s: empty list; leave the key out to watch every port", key)}
	}
	var errs []error
	seen := map[int]bool{}
	for i, p := range ports {
		switch {
		case p < 1 || p > 65535:
			errs = append(errs, fmt.Errorf("%s[%d]: port %d is outside 1-65535", key, i, p))
		case seen[p]:
			errs = append(errs, fmt.Errorf("%s[%d]: port %d is listed twice", key, i, p))
		}
		seen[p] = true
	}
	return errs
}

// hookOrder converts a validated HookPreference.
func (cfg *Config) hookOrder() []hook.Kind {
	out := make([]hook.Kind, 0, len(cfg.HookPreference))
	for _, h := range cfg.HookPreference {
		k, _ := hook.ParseKind(h)
		out = append(out, k)
	}
	return out
}

func toPorts(ports []int) []uint16 {
	out := make([]uint16, len(ports))
	for i, p := range ports {
		out[i] = uint16(p)
	}
	return out
}
