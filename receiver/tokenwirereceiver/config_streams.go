package tokenwirereceiver

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg"
)

// DefaultMaxPendingSpans is streams.max_pending_spans' default: 16,384
// streams a second, far above what LLM servers end, and at most about
// 20 MB of span records with the buffer being sent.
const DefaultMaxPendingSpans = 16384

// Bounds of streams.request_capture_bytes. The kernel sends what it
// captures through the ring buffer, request by request: a megabyte per
// request is already more than a ring buffer of the default size holds.
const (
	DefaultRequestCaptureBytes = 64 << 10
	MinRequestCaptureBytes     = 1 << 10
	MaxRequestCaptureBytes     = 1 << 20
)

// StreamsConfig configures tracking of streamed responses (SSE, chunked
// HTTP, or any protocol in opaque mode) on server sockets.
type StreamsConfig struct {
	// Enabled turns the stream probe on.
	Enabled bool `mapstructure:"enabled"`
	// Required makes Start fail when the stream probe cannot attach. When
	// false (the default), the receiver logs why, reports
	// otelcol_receiver_tokenwire_capability_up{capability="stream"} 0 and
	// runs the other capabilities without it. Setting it while enabled is
	// false is an error.
	Required bool `mapstructure:"required"`
	// Ports are the server ports whose connections are tracked.
	Ports []int `mapstructure:"ports"`
	// Pids, when set, reports only streams written by these processes.
	Pids []int `mapstructure:"pids"`
	// ProcessNames, when set, reports only streams written by processes
	// with these executable names.
	ProcessNames []string `mapstructure:"process_names"`
	// MaxSockets bounds the kernel's per-socket state (LRU) and the
	// receiver's table of open streams.
	MaxSockets int `mapstructure:"max_sockets"`
	// StateSlots is how many connections can keep their kernel state in
	// a preallocated slot (256 bytes each) rather than in socket storage,
	// which costs the write program a helper call per chunk: a power of
	// two up to 1,048,576, or 0 for socket storage alone. Used where the
	// state is in socket storage and the kernel has BPF atomics (5.12+),
	// behind stream.FrontSlots slots that connections try first (and
	// that 0 turns off too); connections beyond them keep theirs in
	// socket storage.
	StateSlots int `mapstructure:"state_slots"`
	// Coalesce joins writes closer together than this into one chunk (a
	// server that writes an event's framing and data separately).
	Coalesce time.Duration `mapstructure:"coalesce"`
	// FlushInterval is the longest a long stream's chunk intervals wait in
	// the kernel before they reach the metrics; at most collection_interval.
	FlushInterval time.Duration `mapstructure:"flush_interval"`
	// MaxPaths and MaxModels cap the distinct http.route and
	// gen_ai.request.model values; the rest are reported as _other. A value
	// not seen for SeriesExpiry gives its place to a new one.
	MaxPaths  int `mapstructure:"max_paths"`
	MaxModels int `mapstructure:"max_models"`
	// Routes are route templates ("/v1/models/{model}:generate"): a path
	// matching one is reported with it as http.route. Other paths get
	// their numeric, UUID and long hex segments replaced by {id}.
	Routes []string `mapstructure:"routes"`
	// MaxSeries caps the stream metrics' attribute sets; streams of new
	// ones beyond it are counted in an overflow series.
	MaxSeries int `mapstructure:"max_series"`
	// SeriesExpiry is how long the series of a process that exited are
	// kept after their last stream.
	SeriesExpiry time.Duration `mapstructure:"series_expiry"`
	// Spans emits one span per streamed response to traces pipelines.
	Spans bool `mapstructure:"spans"`
	// MaxPendingSpans bounds the spans waiting for the next send to the
	// traces pipelines (every second); the spans of further streams are
	// dropped and counted, so a stalled pipeline or a flood of short
	// streams cannot grow the receiver's memory.
	MaxPendingSpans int `mapstructure:"max_pending_spans"`
	// TraceParent says what a request's W3C traceparent does to its
	// span: parent (the span joins the caller's trace), link (the span
	// starts a trace of its own and links to the caller's: for callers
	// that are not trusted to choose the trace) or ignore.
	TraceParent string `mapstructure:"traceparent"`
	// ClientAddress puts client.address and client.port on spans. Off,
	// no peer address leaves the node: the standard attributes and
	// transform processors can drop attributes too, but the module proxy
	// serves no release of them that builds at this distribution's
	// collector release.
	ClientAddress bool `mapstructure:"client_address"`
	// IdleTimeout ends a stream that has written nothing for this long
	// (end reason idle_timeout) and forgets its socket.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// RequestCapture is how many bytes of each request (head and body,
	// however many reads the server takes) the kernel sends to the
	// receiver, which finds the traceparent and the JSON body's "model"
	// in them. Clients put "model" after the messages (the OpenAI SDKs
	// do), so it must cover the prompts the servers get.
	RequestCapture int `mapstructure:"request_capture_bytes"`
	// ResponseDetails sends the kernel's copies of a response's first body
	// write and of the ends of its last events (at most 512 bytes each; a
	// first event written with the head goes with the head, up to 2 KiB) to
	// the receiver, which reads the response model, id, token usage and
	// finish reasons from them. Off, the kernel sends no body write, the
	// receiver ignores body bytes that share the head's write, and those
	// attributes are absent (tokenwire.stream.format is unknown).
	ResponseDetails bool `mapstructure:"response_details"`
	// Providers sets gen_ai.provider.name for the streams of a port, by
	// port number ("8000": vllm): a watched server port, or a client
	// remote port for the calls to it. It wins over the provider a stream's
	// wire format speaks for (openai for OpenAI-compatible servers such
	// as vLLM, anthropic, ollama, huggingface.tgi, llama_cpp); without it
	// a stream in no known format has no provider.
	Providers map[string]string `mapstructure:"providers"`
	// TLS says how streams over TLS are read (tls_config.go).
	TLS StreamsTLSConfig `mapstructure:"tls"`
	// Clients selects the outbound calls measured as clients
	// (config_clients.go).
	Clients StreamsClientsConfig `mapstructure:"clients"`
}

func (s *StreamsConfig) validate(interval time.Duration) []error {
	var errs []error
	if s.Ports == nil && !s.Clients.active() {
		errs = append(errs, errors.New("streams.ports: list at least one server port (or streams.clients.remote_ports)"))
	}
	errs = append(errs, s.Clients.validate()...)
	errs = append(errs, validatePorts("streams.ports", s.Ports)...)
	for i, p := range s.Pids {
		if p < 1 || p > 1<<22 {
			errs = append(errs, fmt.Errorf("streams.pids[%d]: %d is not a process id", i, p))
		}
	}
	for i, n := range s.ProcessNames {
		if n == "" {
			errs = append(errs, fmt.Errorf("streams.process_names[%d]: empty name", i))
		}
	}
	if n := s.MaxSockets; n <= 0 || n > 1<<24 {
		errs = append(errs, fmt.Errorf("streams.max_sockets: must be between 1 and %d, got %d", 1<<24, n))
	}
	if err := stream.CheckStateSlots(int64(s.StateSlots)); err != nil {
		errs = append(errs, fmt.Errorf("streams.state_slots: %w", err))
	}
	if s.Coalesce < 0 || s.Coalesce > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("streams.coalesce: must be between 0 and 100ms, got %v", s.Coalesce))
	}
	if s.FlushInterval <= 0 || (interval > 0 && s.FlushInterval > interval) {
		errs = append(errs, fmt.Errorf("streams.flush_interval: must be positive and at most collection_interval (%v), got %v", interval, s.FlushInterval))
	}
	if s.IdleTimeout < time.Second {
		errs = append(errs, fmt.Errorf("streams.idle_timeout: must be at least 1s, got %v", s.IdleTimeout))
	}
	errs = append(errs, s.TLS.validate()...)
	if err := streamagg.ValidateRoutes(s.Routes); err != nil {
		errs = append(errs, fmt.Errorf("streams.routes: %w", err))
	}
	switch s.TraceParent {
	case TraceParentParent, TraceParentLink, TraceParentIgnore:
	default:
		errs = append(errs, fmt.Errorf("streams.traceparent: %q is not one of parent, link, ignore", s.TraceParent))
	}
	if s.MaxPendingSpans < 1 {
		errs = append(errs, fmt.Errorf("streams.max_pending_spans: must be at least 1, got %d", s.MaxPendingSpans))
	}
	if s.MaxSeries < 1 {
		errs = append(errs, fmt.Errorf("streams.max_series: must be at least 1, got %d", s.MaxSeries))
	}
	if s.SeriesExpiry < time.Minute {
		errs = append(errs, fmt.Errorf("streams.series_expiry: must be at least 1m, got %v", s.SeriesExpiry))
	}
	if s.MaxPaths < 1 {
		errs = append(errs, fmt.Errorf("streams.max_paths: must be at least 1, got %d", s.MaxPaths))
	}
	if s.MaxModels < 1 {
		errs = append(errs, fmt.Errorf("streams.max_models: must be at least 1, got %d", s.MaxModels))
	}
	if s.RequestCapture < MinRequestCaptureBytes || s.RequestCapture > MaxRequestCaptureBytes {
		errs = append(errs, fmt.Errorf("streams.request_capture_bytes: must be between %d and %d, got %d",
			MinRequestCaptureBytes, MaxRequestCaptureBytes, s.RequestCapture))
	}
	return append(errs, s.validateProviders()...)
}

// validateProviders checks streams.providers: each key a watched port or
// a client remote port (the calls' server port),
// each value a provider name as the conventions spell them (lower case
// words joined by '.' or '_': "vllm", "huggingface.tgi", "aws.bedrock").
func (s *StreamsConfig) validateProviders() []error {
	var errs []error
	watched := map[int]bool{}
	for _, p := range s.Ports {
		watched[p] = true
	}
	for _, p := range s.Clients.RemotePorts {
		watched[p] = true
	}
	for _, key := range slices.Sorted(maps.Keys(s.Providers)) {
		port, err := strconv.Atoi(key)
		switch {
		case err != nil || port < 1 || port > 65535:
			errs = append(errs, fmt.Errorf("streams.providers: key %q is not a port (1-65535)", key))
		case !watched[port]:
			errs = append(errs, fmt.Errorf("streams.providers: port %d is not in streams.ports nor streams.clients.remote_ports", port))
		}
		if v := s.Providers[key]; !providerName.MatchString(v) {
			errs = append(errs, fmt.Errorf("streams.providers[%s]: %q is not a provider name (lower-case letters, digits, '_', words joined by '.', at most 64 characters)", key, v))
		}
	}
	return errs
}

// providerName is what a gen_ai.provider.name value looks like: the
// conventions' well-known values, and custom ones named the same way.
var providerName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}(\.[a-z0-9_]{1,63})*$`)

// providers converts a validated streams.providers.
func (s *StreamsConfig) providers() map[uint16]string {
	out := make(map[uint16]string, len(s.Providers))
	for k, v := range s.Providers {
		p, _ := strconv.Atoi(k)
		out[uint16(p)] = v
	}
	return out
}
