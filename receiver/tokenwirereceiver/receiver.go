package tokenwirereceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/handshake"
	"github.com/tokenwire/tokenwire/internal/handshakeagg"
	"github.com/tokenwire/tokenwire/internal/preflight"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/streamagg"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// tokenwireReceiver is one receiver instance, shared by the metrics and the
// traces pipeline that name the same component ID. The first Start loads
// the BPF programs; the last Shutdown unloads them.
type tokenwireReceiver struct {
	cfg    *Config
	set    receiver.Settings
	onLast func() // forgets this instance once every handle is shut down

	nextMu  sync.Mutex // guards metrics and traces
	metrics consumer.Metrics
	traces  consumer.Traces

	mu      sync.Mutex // guards handles and running; held across start and stop
	handles int        // handles created and not yet shut down
	running bool       // BPF loaded, goroutines running

	// Set by start, released by stop.
	mb         *metadata.MetricsBuilder
	telemetry  *metadata.TelemetryBuilder
	resource   pcommon.Resource
	startTime  pcommon.Timestamp
	handshakes *handshake.Tracer
	hsAgg      *handshakeagg.Aggregator
	streams    *stream.Tracer
	stAgg      *streamagg.Aggregator
	// spareSpans is the span buffer emitSpans hands back to stAgg; only
	// the emit loop and stop (after the loop ended) touch it.
	spareSpans []streamagg.Span
	// wall is added to a kernel timestamp to give Unix ns: wallOffset's,
	// taken again for each batch of spans (traceData), so that a step of
	// the wall clock (NTP's first sync after boot) moves the spans as it
	// moves the metrics' time.
	wall       int64
	wallOffset func() int64
	xdp        *xdpState
	status     []capabilityStatus // every enabled capability, up or not
	hostName   string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	emitMu     sync.Mutex // one emission at a time (ticker and final flush)

	// streamOpen is stream.Open; a test sets it to make the stream probe
	// fail on a kernel where it would attach.
	streamOpen func(stream.Config) (*stream.Tracer, error)
}

func newReceiver(set receiver.Settings, cfg *Config, onLast func()) *tokenwireReceiver {
	return &tokenwireReceiver{cfg: cfg, set: set, onLast: onLast, wallOffset: wallOffset}
}

func (r *tokenwireReceiver) setMetrics(next consumer.Metrics) {
	r.nextMu.Lock()
	defer r.nextMu.Unlock()
	r.metrics = next
}

func (r *tokenwireReceiver) setTraces(next consumer.Traces) {
	r.nextMu.Lock()
	defer r.nextMu.Unlock()
	r.traces = next
}

// handle returns a component for one pipeline's use of the receiver.
func (r *tokenwireReceiver) handle() *handle {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handles++
	return &handle{r: r}
}

// handle is what the collector starts and shuts down, once per pipeline
// type. Both handles of an instance drive the same receiver.
type handle struct {
	r        *tokenwireReceiver
	shutOnce sync.Once
}

func (h *handle) Start(ctx context.Context, host component.Host) error {
	r := h.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return nil
	}
	if err := r.start(ctx, host); err != nil {
		return err
	}
	r.running = true
	return nil
}

func (h *handle) Shutdown(ctx context.Context) error {
	var err error
	h.shutOnce.Do(func() {
		r := h.r
		r.mu.Lock()
		defer r.mu.Unlock()
		r.handles--
		// The first Shutdown stops the probes and sends the last data to
		// every pipeline. Waiting for the last one would be too late: the
		// collector shuts a pipeline's processors and exporters down as
		// soon as its own receiver is down, so the pipeline whose handle
		// went first would already be gone (the overhead benchmark lost
		// the last second of spans in 3 runs of 5 that way). The
		// collector only ever shuts all components down together.
		if r.running {
			err = r.stop(ctx, true)
			r.running = false
		}
		if r.handles == 0 {
			r.onLast()
		}
	})
	return err
}

// The capability attribute of self-telemetry: which part of the receiver
// a point is about.
var (
	handshakeAttr = attribute.String("capability", metadata.AttributeCapabilityHandshake.String())
	streamAttr    = attribute.String("capability", metadata.AttributeCapabilityStream.String())
	xdpAttr       = attribute.String("capability", metadata.AttributeCapabilityXdp.String())
)

// capability is one part of the receiver that starts on its own: the
// handshake probe, the stream probe or the XDP filter.
type capability struct {
	attr     attribute.KeyValue
	name     string // in logs and errors: "stream probe"
	key      string // its config section: "streams"
	required bool
	open     func() error // on error, leaves nothing of its own loaded
}

// capabilityStatus is what otelcol_receiver_tokenwire_capability_up
// reports for one enabled capability.
type capabilityStatus struct {
	up    bool
	attrs metric.ObserveOption
}

// capabilities lists the enabled capabilities in the order start opens them.
func (r *tokenwireReceiver) capabilities(ctx context.Context) []capability {
	var caps []capability
	if r.cfg.Handshake.Enabled {
		caps = append(caps, capability{handshakeAttr, "handshake probe", "handshake", r.cfg.Handshake.Required,
			func() error { return r.startHandshakes(ctx) }})
	}
	if r.cfg.Streams.Enabled {
		caps = append(caps, capability{streamAttr, "stream probe", "streams", r.cfg.Streams.Required,
			func() error { return r.startStreams(ctx) }})
	}
	if len(r.cfg.XDP.Interfaces) > 0 {
		caps = append(caps, capability{xdpAttr, "XDP filter", "xdp", r.cfg.XDP.Required, r.startXDP})
	}
	return caps
}

// start loads and attaches every enabled capability. One that cannot start
// does not take the others down: it is logged with the full reason and
// reported as down in self-telemetry, and the rest run. Start fails only
// when a capability marked required cannot start, when none of the
// enabled ones can (the error then gives each one's reason), or when the
// process lacks the privileges or kernel BTF that all of them need.
// Whatever did start is released again when start fails.
func (r *tokenwireReceiver) start(_ context.Context, _ component.Host) (err error) {
	if err := preflight.Check(preflight.Needs{NetAdmin: len(r.cfg.XDP.Interfaces) > 0}); err != nil {
		return err
	}
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; on newer ones
	// this is a no-op.
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("raising RLIMIT_MEMLOCK for BPF maps (run as root or with CAP_SYS_RESOURCE): %w", err)
	}

	r.startTime = pcommon.NewTimestampFromTime(time.Now())
	r.mb = metadata.NewMetricsBuilder(r.cfg.MetricsBuilderConfig, r.set, metadata.WithStartTime(r.startTime))
	rb := r.mb.NewResourceBuilder()
	if host, herr := os.Hostname(); herr == nil {
		rb.SetHostName(host)
		r.hostName = host
	}
	r.resource = rb.Emit()
	if r.telemetry, err = metadata.NewTelemetryBuilder(r.set.TelemetrySettings); err != nil {
		return fmt.Errorf("creating self-telemetry: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	defer func() {
		if err != nil {
			// Detach whatever did attach; a receiver that failed to
			// start exports nothing.
			_ = r.stop(context.Background(), false)
		}
	}()

	caps := r.capabilities(ctx)
	r.status = r.status[:0]
	type failure struct {
		c   capability
		err error
	}
	var failed []failure
	for _, c := range caps {
		cerr := c.open()
		if cerr == nil {
			r.status = append(r.status, capabilityStatus{up: true,
				attrs: metric.WithAttributeSet(attribute.NewSet(c.attr))})
			continue
		}
		if c.required {
			errs := []error{fmt.Errorf("tokenwire %s could not start and %s.required is true: %w", c.name, c.key, cerr)}
			for _, f := range failed {
				errs = append(errs, fmt.Errorf("tokenwire %s could not start either: %w", f.c.name, f.err))
			}
			return errors.Join(errs...)
		}
		failed = append(failed, failure{c, cerr})
		r.status = append(r.status, capabilityStatus{up: false, attrs: metric.WithAttributeSet(attribute.NewSet(c.attr,
			attribute.String("error.type", startErrorType(cerr))))})
	}
	if len(caps) > 0 && len(failed) == len(caps) {
		errs := make([]error, len(failed))
		for i, f := range failed {
			errs[i] = fmt.Errorf("tokenwire %s: %w", f.c.name, f.err)
		}
		return fmt.Errorf("no tokenwire capability could start:\n%w", errors.Join(errs...))
	}
	// One line per capability that is down, with the whole reason in it:
	// the refusals of several hook types, which the error joins with
	// newlines, are joined with "; ", and no stack trace follows (the
	// collector's logger adds one to error lines; ours would only show
	// start's callers).
	logger := r.set.Logger.WithOptions(zap.AddStacktrace(zap.FatalLevel))
	for _, f := range failed {
		logger.Error("tokenwire "+f.c.name+" could not start; the receiver runs without it",
			zap.String(string(f.c.attr.Key), f.c.attr.Value.AsString()),
			zap.String("error", strings.ReplaceAll(f.err.Error(), "\n", "; ")))
	}
	if err = r.registerTelemetry(); err != nil {
		return err
	}

	r.wg.Add(1)
	go r.emitLoop(ctx)
	return nil
}

// startErrorType is the error.type of a capability that could not start: the
// name of the first kernel error code in err's chain (EPERM, ENOENT, ...),
// or _OTHER. Low cardinality on purpose; the full reason is logged.
func startErrorType(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		if errno == unix.EOPNOTSUPP {
			return "EOPNOTSUPP" // ErrnoName says ENOTSUP, its alias on Linux
		}
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
	}
	return "_OTHER"
}

// stop detaches and frees everything start created, in reverse order, and
// leaves alone what never started. With flush, what was read so far is
// exported first.
func (r *tokenwireReceiver) stop(ctx context.Context, flush bool) error {
	var errs []error
	if r.cancel != nil {
		r.cancel()
	}
	// The self-telemetry callbacks read the maps closed below: unregistered
	// first, which waits for a collection that is running them. The
	// instruments stay for the read loops' last records.
	if r.telemetry != nil {
		r.telemetry.Shutdown()
	}
	// Detach first and let the read loops drain what the kernel already
	// wrote: records still in a ring buffer (up to a poll interval, or a
	// wake-up batch) are streams and handshakes that happened.
	if r.handshakes != nil {
		errs = append(errs, r.handshakes.Stop())
	}
	if r.streams != nil {
		errs = append(errs, r.streams.Stop())
	}
	r.wg.Wait()
	if r.handshakes != nil {
		errs = append(errs, r.handshakes.Close())
	}
	if r.streams != nil {
		errs = append(errs, r.streams.Close())
	}
	if flush && (r.handshakes != nil || r.streams != nil || r.xdp != nil) {
		// Everything read so far goes out before we stop: a short-lived
		// collector must not lose its last interval.
		if r.hsAgg != nil {
			r.hsAgg.Settle()
		}
		r.emit(ctx)
		r.emitSpans(ctx)
		// Streams whose end was not seen (under way, waiting for their
		// response, or whose END was lost and the idle timeout has not
		// passed) have no end to report: their chunks so far are in the
		// metrics (PROGRESS records), but no span or duration.
		if r.stAgg != nil {
			if n := r.stAgg.OpenCount(); n > 0 {
				r.set.Logger.Info("tokenwire stopped with streams whose end it had not seen; they get no span or duration",
					zap.Int("streams", n))
			}
		}
	}
	r.handshakes, r.streams, r.hsAgg, r.stAgg = nil, nil, nil, nil
	r.spareSpans = nil
	if r.xdp != nil {
		// Detaching restores the interfaces: traffic passes unfiltered.
		errs = append(errs, r.xdp.filter.Close())
		r.xdp = nil
	}
	r.telemetry = nil
	return errors.Join(errs...)
}

// readLoop hands every record of one tracer to add, reusing one record
// value, until the tracer is closed.
func readLoop[R any](ctx context.Context, r *tokenwireReceiver, capability attribute.KeyValue,
	read func(*R) error, closed error, add func(*R)) {
	defer r.wg.Done()
	var rec R
	// Built once: a variadic call would allocate its option slice per record.
	counted := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(capability))}
	for {
		if err := read(&rec); err != nil {
			if errors.Is(err, closed) {
				return
			}
			r.set.Logger.Warn("reading BPF records", zap.String(string(capability.Key), capability.Value.AsString()), zap.Error(err))
			continue
		}
		r.telemetry.ReceiverTokenwireRecordsRead.Add(ctx, 1, counted...)
		add(&rec)
	}
}
