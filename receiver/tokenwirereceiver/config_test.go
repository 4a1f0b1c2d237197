package tokenwirereceiver

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	tests := []struct {
		id   component.ID
		want func() *Config
	}{
		{id: component.NewID(metadata.Type), want: createDefaultConfig},
		{
			id: component.NewIDWithName(metadata.Type, "custom"),
			want: func() *Config {
				c := createDefaultConfig()
				c.CollectionInterval = 30 * time.Second
				c.HookPreference = []string{"tp_btf", "tracepoint"}
				c.RingBufferSize = 1 << 20
				c.Handshake.Ports = []int{443, 8000}
				c.Handshake.MaxTrackedSockets = 1024
				c.Metrics.TokenwireTCPHandshakeFailures.Enabled = false
				return c
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "streams"),
			want: func() *Config {
				c := createDefaultConfig()
				c.Streams = StreamsConfig{
					Enabled: true, Ports: []int{8000}, Pids: []int{1234}, ProcessNames: []string{"vllm"},
					MaxSockets: 2048, StateSlots: 0, Coalesce: time.Millisecond, FlushInterval: 2 * time.Second,
					MaxPaths: 10, MaxModels: 5, Spans: false, MaxPendingSpans: 1000, IdleTimeout: 30 * time.Second,
					Routes: []string{"/v1/models/{model}:generate"}, MaxSeries: 300, SeriesExpiry: time.Hour, TraceParent: TraceParentLink,
					RequestCapture: 128 << 10, ResponseDetails: false, ClientAddress: false, Providers: map[string]string{"8000": "vllm"},
					TLS: StreamsTLSConfig{Enabled: true, Libraries: []string{"libssl", "go"},
						ExcludeProcessNames: []string{"envoy"}, ScanInterval: 30 * time.Second,
						SystemWide: []string{"/usr/lib/x86_64-linux-gnu/libssl.so.3"}},
					Clients: StreamsClientsConfig{Enabled: true, RemotePorts: []int{443, 11434},
						Hosts: []string{"api.openai.com", "::1"}, ProcessNames: []string{"python3"}, Pids: []int{4321}},
				}
				return c
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "tls_off"),
			want: func() *Config {
				c := createDefaultConfig()
				c.Streams.TLS.Enabled = false
				return c
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "xdp"),
			want: func() *Config {
				c := createDefaultConfig()
				c.XDP = XDPConfig{
					Interfaces: []string{"eth0", "eth1"}, Required: true, Mode: "native",
					Blocklist: []string{"192.0.2.0/24", "2001:db8::/32"}, BlocklistFile: "/etc/tokenwire/blocklist",
					EndMarker: "# end of list", MaxFileBytes: 1 << 20, Allowlist: []string{"192.0.2.10", "2001:db8::/64"},
					MinPrefixLenIPv4: 16, MinPrefixLenIPv6: 24, PermitBlockAll: true,
					CapacityIPv4: 1024, CapacityIPv6: 512, WatchInterval: 5 * time.Second,
				}
				return c
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "required"),
			want: func() *Config {
				c := createDefaultConfig()
				c.Handshake.Required = true
				c.Streams.Required = true
				c.XDP.Interfaces = []string{"eth0"}
				c.XDP.Required = false
				return c
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			require.NoError(t, confmap.Validate(cfg))
			want := tt.want()
			got := cfg.(*Config)
			// The generated metric config remembers whether the user set
			// a field (unexported); compare what users see, then the rest.
			require.Equal(t, want.Metrics.TokenwireTCPHandshakeFailures.Enabled, got.Metrics.TokenwireTCPHandshakeFailures.Enabled)
			want.MetricsBuilderConfig = got.MetricsBuilderConfig
			require.Equal(t, want, got)
		})
	}
}

func TestDefaultConfigIsValid(t *testing.T) {
	require.NoError(t, confmap.Validate(createDefaultConfig()))
}

// Provider names as the conventions spell them are accepted: well-known
// values and custom ones alike.
func TestProviderNames(t *testing.T) {
	for _, name := range []string{"vllm", "openai", "aws.bedrock", "huggingface.tgi", "llama_cpp", "gcp.vertex_ai", "sglang2"} {
		cfg := createDefaultConfig()
		cfg.Streams.Providers = map[string]string{"8000": name, "11434": "ollama"}
		require.NoError(t, confmap.Validate(cfg), name)
		require.Equal(t, map[uint16]string{8000: name, 11434: "ollama"}, cfg.Streams.providers())
	}
}

// TestRequiredDefaults: the observability probes are optional by default
// (one that cannot attach leaves the others running); the XDP filter,
// once interfaces are named, is required (an enforcement filter must not
// be silently missing).
func TestRequiredDefaults(t *testing.T) {
	cfg := createDefaultConfig()
	require.False(t, cfg.Handshake.Required, "handshake.required")
	require.False(t, cfg.Streams.Required, "streams.required")
	require.True(t, cfg.XDP.Required, "xdp.required")
	// Required is accepted on an enabled capability, and on XDP with or
	// without interfaces (it has no effect without them).
	cfg.Handshake.Required, cfg.Streams.Required = true, true
	require.NoError(t, confmap.Validate(cfg))
	cfg.XDP.Interfaces = []string{"eth0"}
	require.NoError(t, confmap.Validate(cfg))
	cfg.XDP.Required = false
	require.NoError(t, confmap.Validate(cfg))
}

// TestValidateRejectsEveryBadField checks that each invalid value is
// rejected with an error naming its key.
func TestValidateRejectsEveryBadField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"zero interval", func(c *Config) { c.CollectionInterval = 0 }, "collection_interval: must be positive"},
		{"negative interval", func(c *Config) { c.CollectionInterval = -time.Second }, "collection_interval: must be positive"},
		{"no hooks", func(c *Config) { c.HookPreference = []string{} }, "hook_preference: must list at least one"},
		{"unknown hook", func(c *Config) { c.HookPreference = []string{"tp_btf", "uprobe"} }, `hook_preference[1]: unknown hook type "uprobe"`},
		{"repeated hook", func(c *Config) { c.HookPreference = []string{"kprobe", "kprobe"} }, `hook_preference[1]: "kprobe" is listed twice`},
		{"ring buffer not a power of two", func(c *Config) { c.RingBufferSize = 300000 }, "ring_buffer_size: must be a power of two"},
		{"ring buffer below a page", func(c *Config) { c.RingBufferSize = 1024 }, "ring_buffer_size: must be a power of two"},
		{"negative ring buffer", func(c *Config) { c.RingBufferSize = -4096 }, "ring_buffer_size: must be a power of two"},
		{"empty port list", func(c *Config) { c.Handshake.Ports = []int{} }, "handshake.ports: empty list"},
		{"port 0", func(c *Config) { c.Handshake.Ports = []int{0} }, "handshake.ports[0]: port 0 is outside 1-65535"},
		{"port above 65535", func(c *Config) { c.Handshake.Ports = []int{80, 65536} }, "handshake.ports[1]: port 65536 is outside 1-65535"},
		{"negative port", func(c *Config) { c.Handshake.Ports = []int{-1} }, "handshake.ports[0]: port -1 is outside 1-65535"},
		{"duplicate port", func(c *Config) { c.Handshake.Ports = []int{8000, 8000} }, "handshake.ports[1]: port 8000 is listed twice"},
		{"zero tracked sockets", func(c *Config) { c.Handshake.MaxTrackedSockets = 0 }, "handshake.max_tracked_sockets: must be between 1"},
		{"negative tracked sockets", func(c *Config) { c.Handshake.MaxTrackedSockets = -5 }, "handshake.max_tracked_sockets: must be between 1"},
		{"huge tracked sockets", func(c *Config) { c.Handshake.MaxTrackedSockets = 1 << 30 }, "handshake.max_tracked_sockets: must be between 1"},
		{"no stream ports", func(c *Config) { c.Streams.Ports = nil }, "streams.ports: list at least one server port"},
		{"empty stream ports", func(c *Config) { c.Streams.Ports = []int{} }, "streams.ports: empty list"},
		{"stream port 0", func(c *Config) { c.Streams.Ports = []int{8000, 0} }, "streams.ports[1]: port 0 is outside 1-65535"},
		{"duplicate stream port", func(c *Config) { c.Streams.Ports = []int{8000, 8000} }, "streams.ports[1]: port 8000 is listed twice"},
		{"bad pid", func(c *Config) { c.Streams.Pids = []int{0} }, "streams.pids[0]: 0 is not a process id"},
		{"pid beyond the kernel's", func(c *Config) { c.Streams.Pids = []int{1, 1<<22 + 1} }, "streams.pids[1]: 4194305 is not a process id"},
		{"empty process name", func(c *Config) { c.Streams.ProcessNames = []string{""} }, "streams.process_names[0]: empty name"},
		{"zero stream sockets", func(c *Config) { c.Streams.MaxSockets = 0 }, "streams.max_sockets: must be between 1"},
		{"state slots not a power of two", func(c *Config) { c.Streams.StateSlots = 1000 }, "streams.state_slots: must be 0 or a power of two up to 1048576, got 1000"},
		{"negative state slots", func(c *Config) { c.Streams.StateSlots = -8 }, "streams.state_slots: must be 0 or a power of two up to 1048576, got -8"},
		{"huge state slots", func(c *Config) { c.Streams.StateSlots = 1 << 21 }, "streams.state_slots: must be 0 or a power of two up to 1048576, got 2097152"},
		{"negative coalesce", func(c *Config) { c.Streams.Coalesce = -time.Millisecond }, "streams.coalesce: must be between 0 and 100ms"},
		{"huge coalesce", func(c *Config) { c.Streams.Coalesce = time.Second }, "streams.coalesce: must be between 0 and 100ms"},
		{"zero flush", func(c *Config) { c.Streams.FlushInterval = 0 }, "streams.flush_interval: must be positive"},
		{"flush beyond interval", func(c *Config) { c.Streams.FlushInterval = time.Minute }, "streams.flush_interval: must be positive and at most collection_interval"},
		{"zero max paths", func(c *Config) { c.Streams.MaxPaths = 0 }, "streams.max_paths: must be at least 1"},
		{"negative max models", func(c *Config) { c.Streams.MaxModels = -1 }, "streams.max_models: must be at least 1"},
		{"route without /", func(c *Config) { c.Streams.Routes = []string{"v1/x"} }, `streams.routes: route "v1/x" does not start with /`},
		{"route with two wildcards in a segment", func(c *Config) { c.Streams.Routes = []string{"/v1/{a}{b}"} }, `streams.routes: route "/v1/{a}{b}": segment "{a}{b}" needs one {name} at most`},
		{"no series", func(c *Config) { c.Streams.MaxSeries = 0 }, "streams.max_series: must be at least 1"},
		{"nothing enabled", func(c *Config) { c.Handshake.Enabled, c.Streams.Enabled = false, false },
			"nothing to do: handshake.enabled and streams.enabled are false and xdp.interfaces is empty"},
		{"no pending spans", func(c *Config) { c.Streams.MaxPendingSpans = 0 }, "streams.max_pending_spans: must be at least 1, got 0"},
		{"bad traceparent mode", func(c *Config) { c.Streams.TraceParent = "trust" }, `streams.traceparent: "trust" is not one of parent, link, ignore`},
		{"short series expiry", func(c *Config) { c.Streams.SeriesExpiry = time.Second }, "streams.series_expiry: must be at least 1m"},
		{"short idle timeout", func(c *Config) { c.Streams.IdleTimeout = time.Millisecond }, "streams.idle_timeout: must be at least 1s"},
		{"small request capture", func(c *Config) { c.Streams.RequestCapture = 512 }, "streams.request_capture_bytes: must be between 1024 and 1048576, got 512"},
		{"huge request capture", func(c *Config) { c.Streams.RequestCapture = 4 << 20 }, "streams.request_capture_bytes: must be between 1024 and 1048576"},
		{"short tls scan", func(c *Config) { c.Streams.TLS.ScanInterval = time.Millisecond }, "streams.tls.scan_interval: must be between 100ms and 10m0s, got 1ms"},
		{"zero tls scan", func(c *Config) { c.Streams.TLS.ScanInterval = 0 }, "streams.tls.scan_interval: must be between 100ms and 10m0s, got 0s"},
		{"long tls scan", func(c *Config) { c.Streams.TLS.ScanInterval = time.Hour }, "streams.tls.scan_interval: must be between 100ms and 10m0s, got 1h0m0s"},
		{"unknown tls library", func(c *Config) { c.Streams.TLS.Libraries = []string{"go", "rustls"} }, `streams.tls.libraries[1]: "rustls" is not one of [libssl openssl_static go]`},
		{"tls library twice", func(c *Config) { c.Streams.TLS.Libraries = []string{"go", "go"} }, `streams.tls.libraries[1]: "go" is listed twice`},
		{"no tls library", func(c *Config) { c.Streams.TLS.Libraries = []string{} }, "streams.tls.libraries: empty list (set streams.tls.enabled: false to probe none)"},
		{"tls exclude path", func(c *Config) { c.Streams.TLS.ExcludeProcessNames = []string{"/usr/bin/node"} }, `streams.tls.exclude_process_names[0]: "/usr/bin/node" is not an executable name`},
		{"tls system_wide relative", func(c *Config) { c.Streams.TLS.SystemWide = []string{"libssl.so.3"} }, `streams.tls.system_wide[0]: "libssl.so.3" is not a clean absolute path`},
		{"tls system_wide twice", func(c *Config) { c.Streams.TLS.SystemWide = []string{"/usr/bin/node", "/usr/bin/node"} }, `streams.tls.system_wide[1]: "/usr/bin/node" is listed twice`},
		{"tls exclude empty", func(c *Config) { c.Streams.TLS.ExcludeProcessNames = []string{""} }, `streams.tls.exclude_process_names[0]: "" is not an executable name`},
		{"provider key not a port", func(c *Config) { c.Streams.Providers = map[string]string{"vllm": "vllm"} }, `streams.providers: key "vllm" is not a port (1-65535)`},
		{"provider port out of range", func(c *Config) { c.Streams.Providers = map[string]string{"70000": "vllm"} }, `streams.providers: key "70000" is not a port`},
		{"provider port not watched", func(c *Config) { c.Streams.Providers = map[string]string{"9000": "vllm"} }, "streams.providers: port 9000 is not in streams.ports nor streams.clients.remote_ports"},
		{"provider name with upper case", func(c *Config) { c.Streams.Providers = map[string]string{"8000": "vLLM"} }, `streams.providers[8000]: "vLLM" is not a provider name`},
		{"empty provider name", func(c *Config) { c.Streams.Providers = map[string]string{"8000": ""} }, `streams.providers[8000]: "" is not a provider name`},
		{"provider name with an empty word", func(c *Config) { c.Streams.Providers = map[string]string{"8000": "aws..bedrock"} }, `streams.providers[8000]: "aws..bedrock" is not a provider name`},
		{"client port out of range", func(c *Config) { c.Streams.Clients.RemotePorts = []int{443, 0} }, "streams.clients.remote_ports[1]: port 0 is outside 1-65535"},
		{"client ports empty", func(c *Config) { c.Streams.Clients.RemotePorts = []int{} }, "streams.clients.remote_ports: empty list"},
		{"too many client ports", func(c *Config) {
			for p := range 17 {
				c.Streams.Clients.RemotePorts = append(c.Streams.Clients.RemotePorts, 1000+p)
			}
		}, "streams.clients.remote_ports: at most 16 ports, got 17"},
		{"client process path", func(c *Config) { c.Streams.Clients.ProcessNames = []string{"/usr/bin/python3"} }, `streams.clients.process_names[0]: "/usr/bin/python3" is not a process name`},
		{"client pid", func(c *Config) { c.Streams.Clients.Pids = []int{0} }, "streams.clients.pids[0]: 0 is not a process id"},
		{"client host with port", func(c *Config) { c.Streams.Clients.Hosts = []string{"api.openai.com:443"} }, `streams.clients.hosts[0]: "api.openai.com:443" is not a host name or address`},
		{"client host with scheme", func(c *Config) { c.Streams.Clients.Hosts = []string{"https://api.openai.com"} }, `streams.clients.hosts[0]: "https://api.openai.com" is not a host name`},
		{"client selection without ports", func(c *Config) { c.Streams.Clients.Hosts = []string{"api.openai.com"} }, "streams.clients: hosts, process_names or pids select among the calls to remote_ports: list at least one remote port"},
		{"no server and no client port", func(c *Config) { c.Streams.Ports = nil }, "streams.ports: list at least one server port (or streams.clients.remote_ports)"},
		{"empty interface name", func(c *Config) { c.XDP.Interfaces = []string{""} }, `xdp.interfaces[0]: empty name`},
		{"long interface name", func(c *Config) { c.XDP.Interfaces = []string{"averyveryverylongname"} }, "xdp.interfaces[0]"},
		{"repeated interface", func(c *Config) { c.XDP.Interfaces = []string{"eth0", "eth0"} }, `xdp.interfaces[1]: "eth0" is listed twice`},
		{"bad xdp mode", func(c *Config) { c.XDP.Interfaces, c.XDP.Mode = []string{"eth0"}, "offload" }, `xdp.mode: "offload" is not one of auto, native, generic`},
		{"bad blocklist entry", func(c *Config) { c.XDP.Interfaces, c.XDP.Blocklist = []string{"eth0"}, []string{"10.0.0.0/33"} }, "xdp.blocklist[0]"},
		{"blocklist prefix too wide", func(c *Config) {
			c.XDP.Interfaces, c.XDP.Blocklist = []string{"eth0"}, []string{"192.0.2.0/24", "10.1.2.3/7"}
		},
			"xdp.blocklist[1]: 10.1.2.3/7 (10.0.0.0/7) is wider than /8"},
		{"block everything unasked", func(c *Config) { c.XDP.Interfaces, c.XDP.Blocklist = []string{"eth0"}, []string{"::/0"} }, "xdp.blocklist[0]"},
		{"bad allowlist entry", func(c *Config) { c.XDP.Interfaces, c.XDP.Allowlist = []string{"eth0"}, []string{"not-an-address"} }, "xdp.allowlist[0]"},
		{"zero ipv4 capacity", func(c *Config) { c.XDP.Interfaces, c.XDP.CapacityIPv4 = []string{"eth0"}, 0 }, "xdp.capacity_ipv4: must be between 1"},
		{"negative ipv6 capacity", func(c *Config) { c.XDP.Interfaces, c.XDP.CapacityIPv6 = []string{"eth0"}, -1 }, "xdp.capacity_ipv6: must be between 1"},
		{"capacity beyond a whole table", func(c *Config) { c.XDP.Interfaces, c.XDP.CapacityIPv4 = []string{"eth0"}, 1<<21 }, "xdp.capacity_ipv4: must be between 1 and 1048576"},
		{"zero minimum prefix", func(c *Config) { c.XDP.Interfaces, c.XDP.MinPrefixLenIPv6 = []string{"eth0"}, 0 }, "xdp.min_prefix_len_ipv6: must be at least 1"},
		{"minimum prefix beyond the family", func(c *Config) { c.XDP.Interfaces, c.XDP.MinPrefixLenIPv4 = []string{"eth0"}, 33 }, "xdp.min_prefix_len_ipv4: 33 is not between 1 and 32"},
		{"end marker without a file", func(c *Config) { c.XDP.Interfaces, c.XDP.EndMarker = []string{"eth0"}, "# end" }, "xdp.end_marker: set, but there is no blocklist_file"},
		{"end marker not a comment", func(c *Config) {
			c.XDP.Interfaces, c.XDP.BlocklistFile, c.XDP.EndMarker = []string{"eth0"}, "/etc/blocklist", "END"
		}, `xdp.end_marker: "END" must be one comment line`},
		{"zero watch interval", func(c *Config) { c.XDP.Interfaces, c.XDP.WatchInterval = []string{"eth0"}, 0 }, "xdp.watch_interval: must be positive"},
		{"zero max file bytes", func(c *Config) { c.XDP.Interfaces, c.XDP.MaxFileBytes = []string{"eth0"}, 0 }, "xdp.max_file_bytes: must be positive"},
		{"blocklist without interfaces", func(c *Config) { c.XDP.Blocklist = []string{"192.0.2.0/24"} }, "xdp.interfaces: a blocklist or allowlist is set but no interface"},
		{"allowlist without interfaces", func(c *Config) { c.XDP.Allowlist = []string{"192.0.2.1"} }, "xdp.interfaces: a blocklist or allowlist is set but no interface"},
		{"required handshake disabled", func(c *Config) { c.Handshake.Enabled, c.Handshake.Required = false, true }, "handshake.required: the handshake probe cannot be required while handshake.enabled is false"},
		{"required streams disabled", func(c *Config) { c.Streams.Enabled, c.Streams.Required = false, true }, "streams.required: the stream probe cannot be required while streams.enabled is false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			tt.mutate(cfg)
			err := confmap.Validate(cfg)
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
		})
	}

	// Several bad fields at once: every one is reported, not just the first.
	cfg := createDefaultConfig()
	cfg.CollectionInterval = 0
	cfg.RingBufferSize = 3
	cfg.Handshake.Ports = []int{0}
	err := confmap.Validate(cfg)
	require.Error(t, err)
	for _, key := range []string{"collection_interval", "ring_buffer_size", "handshake.ports[0]"} {
		require.True(t, strings.Contains(err.Error(), key), "error %q does not name %s", err, key)
	}
}

// TLS plaintext is on by default, for every kind of TLS code the probes
// know, and probes only the processes the streams filter keeps.
func TestTLSDefaultsAndSelection(t *testing.T) {
	cfg := createDefaultConfig()
	require.True(t, cfg.Streams.TLS.Enabled)
	require.Equal(t, []string{"libssl", "openssl_static", "go"}, cfg.Streams.TLS.Libraries)
	require.Equal(t, 5*time.Second, cfg.Streams.TLS.ScanInterval)

	sel := cfg.Streams.probe(nil).Select
	require.True(t, sel(1, "python3"), "no filter: every process serving a watched port")
	cfg.Streams.TLS.ExcludeProcessNames = []string{"envoy"}
	sel = cfg.Streams.probe(nil).Select
	require.False(t, sel(1, "envoy"))
	cfg.Streams.Pids, cfg.Streams.ProcessNames = []int{7}, []string{"node"}
	sel = cfg.Streams.probe(nil).Select
	require.True(t, sel(7, "python3"), "selected by pid")
	require.True(t, sel(8, "node"), "selected by name")
	require.False(t, sel(8, "python3"), "its streams are filtered out: not worth a uprobe")

	cfg.Streams.TLS.Enabled = false
	require.False(t, cfg.Streams.probe(nil).Enabled)
	// An empty list is fine when nothing is probed anyway.
	cfg.Streams.TLS.Libraries = []string{}
	require.NoError(t, confmap.Validate(cfg))
}
