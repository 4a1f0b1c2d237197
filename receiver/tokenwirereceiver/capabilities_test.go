package tokenwirereceiver

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/hook"
	"github.com/tokenwire/tokenwire/internal/stream"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/xdp"
)

// streamRefusal is a way to make the stream probe fail for real on this
// kernel, found by trying: the first hook type, cheapest last, that the
// stream probe cannot attach with here. On this suite's 6.18 kernel that
// is kprobe (no CONFIG_KPROBES): the kernel refuses it, as it refuses
// hook_preference: [kprobe] to the stream probe on such a kernel. Should
// every type attach, an empty order is used: the probe then has no program
// to attach, which is still its own stream.Open failing after it loaded
// its maps.
type streamRefusal struct {
	order []hook.Kind
	err   error // what stream.Open said when tried alone
}

func findStreamRefusal(t *testing.T) streamRefusal {
	t.Helper()
	for _, k := range slices.Backward(hook.DefaultOrder) {
		tr, err := stream.Open(stream.Config{
			Ports: []uint16{9}, MaxSockets: 64, RingBufferBytes: pageSize * 4,
			HookOrder: []hook.Kind{k}, FlushInterval: time.Second, GapBounds: stream.DefaultGapBounds,
		})
		if err != nil {
			t.Logf("the stream probe cannot attach with %s here: %v", k, err)
			return streamRefusal{order: []hook.Kind{k}, err: err}
		}
		require.NoError(t, tr.Close())
	}
	_, err := stream.Open(stream.Config{MaxSockets: 64, RingBufferBytes: pageSize * 4, HookOrder: []hook.Kind{},
		FlushInterval: time.Second, GapBounds: stream.DefaultGapBounds})
	require.Error(t, err)
	t.Logf("every hook type attaches the stream probe here; with none: %v", err)
	return streamRefusal{order: []hook.Kind{}, err: err}
}

// seam makes the receiver's stream probe open with the refused order. The
// handshake probe and the XDP filter keep the test's configuration.
func (sr streamRefusal) seam(r *tokenwireReceiver) {
	r.streamOpen = func(c stream.Config) (*stream.Tracer, error) {
		c.HookOrder = sr.order
		return stream.Open(c)
	}
}

// TestStreamProbeDownOthersRun: the stream probe cannot attach; Start
// succeeds, the handshake probe counts every handshake and the XDP filter
// every dropped frame, exactly; self-telemetry says stream 0, handshake 1,
// xdp 1; the failure is logged once, with its reason; Shutdown releases
// everything that started.
func TestStreamProbeDownOthersRun(t *testing.T) {
	bpftest.Require(t)
	refusal := findStreamRefusal(t)
	// XDP on one end of a veth pair between two namespaces of our own:
	// nothing else sends there, so every frame counted is ours.
	a, b := bpftest.VethPair(t)
	veth := b.Veth(t).Name
	ln, port := teststack.AcceptAndClose(t) // its goroutine ends in a cleanup
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base := newBaseline(t)

	cfg := probesOnPort(port)
	cfg.XDP.Interfaces = []string{veth}
	cfg.XDP.Mode = xdp.ModeGeneric
	cfg.XDP.Blocklist = []string{a.Addr + "/32"}
	require.NoError(t, cfg.Validate())
	require.False(t, cfg.Streams.Required)

	o := startObserved(t, cfg, &b, refusal.seam)
	require.NoError(t, o.startErr, "one capability down must not fail Start")

	// The stream probe left nothing loaded; the others are attached.
	require.Empty(t, ours(t, base, "tw_st_"), "the failed stream probe left objects loaded")
	require.NotEmpty(t, ours(t, base, "tw_hs_"), "handshake probe not loaded")
	require.Len(t, b.Veth(t).XDPProgramIDs(), 1, "XDP filter not attached")

	const handshakes, frames = 20, 50
	for range handshakes {
		c, err := net.Dial("tcp4", ln.Addr().String())
		require.NoError(t, err)
		c.Close()
	}
	a.Do(t, func() {
		conn, err := net.Dial("udp4", b.Addr+":9")
		require.NoError(t, err)
		defer conn.Close()
		for range frames {
			_, err := conn.Write([]byte("blocked"))
			require.NoError(t, err)
		}
	})
	client, server := handshakeSeries(port)
	drop := map[string]any{"network.interface.name": veth, "tokenwire.xdp.action": "drop", "tokenwire.xdp.reason": "blocklist"}
	require.Eventually(t, func() bool {
		md := lastEmission(o.metrics)
		c, _ := histogramCount(md, "tokenwire.tcp.handshake.duration", client)
		s, _ := histogramCount(md, "tokenwire.tcp.handshake.duration", server)
		d, _ := sumValue(md, "tokenwire.xdp.packets", drop)
		return c >= handshakes && s >= handshakes && d >= frames
	}, 5*time.Second, 20*time.Millisecond)

	// Self-telemetry, through the collector's reader.
	up := o.capabilityUp(t)
	require.Equal(t, map[string]upPoint{
		"stream":    {up: 0, errorType: startErrorType(refusal.err)}, // ENOENT here: no kprobe_events in tracefs
		"handshake": {up: 1},
		"xdp":       {up: 1},
	}, up)
	// The programs gauge has no stream point.
	attached, err := o.tel.GetMetric("otelcol_receiver_tokenwire_programs_attached")
	require.NoError(t, err)
	for _, dp := range attached.Data.(metricdata.Gauge[int64]).DataPoints {
		c, _ := dp.Attributes.Value("capability")
		require.NotEqual(t, "stream", c.AsString(), "a stream program reported attached: %v", dp.Attributes)
	}

	// One error line, naming the capability and the whole reason.
	errs := o.errorLogs()
	require.Len(t, errs, 1, "error logs: %v", errs)
	e := errs[0]
	t.Logf("logged: %s", logLine(e))
	require.Equal(t, "tokenwire stream probe could not start; the receiver runs without it", e.Message)
	require.Empty(t, e.Stack, "a stack trace makes the line many lines and says nothing about the kernel")
	fields := e.ContextMap()
	require.Equal(t, "stream", fields["capability"])
	reason := fields["error"].(string)
	require.True(t, strings.HasPrefix(reason, "attaching the stream probe to "), reason)
	if len(refusal.order) > 0 {
		require.Contains(t, reason, "no hook type works on this kernel: "+string(refusal.order[0])+": ")
	}
	require.NotContains(t, reason, "\n")

	// Shutdown: the final flush has exact totals, and nothing stays.
	o.shutdown(t)
	md := lastEmission(o.metrics)
	for _, attrs := range []map[string]any{client, server} {
		count, points := histogramCount(md, "tokenwire.tcp.handshake.duration", attrs)
		require.Equal(t, 1, points, "one series for %v", attrs)
		require.EqualValues(t, handshakes, count, "handshakes for %v", attrs)
	}
	dropped, points := sumValue(md, "tokenwire.xdp.packets", drop)
	require.Equal(t, 1, points)
	require.EqualValues(t, frames, dropped)
	_, streamPoints := sumValue(md, "tokenwire.stream.chunks", nil)
	require.Zero(t, streamPoints, "stream metrics from a probe that never ran")
	require.Empty(t, b.Veth(t).XDPProgramIDs(), "Shutdown must detach the XDP filter")
	requireNothingLoaded(t, base, "Shutdown")
}

// TestRequiredStreamProbe: with streams.required, the same failure fails
// Start with the stream probe's reason, and the handshake probe that had
// already attached is released again.
func TestRequiredStreamProbe(t *testing.T) {
	bpftest.Require(t)
	refusal := findStreamRefusal(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base := newBaseline(t)

	cfg := createDefaultConfig()
	cfg.HookPreference = bpftest.HookPreference()
	cfg.Streams.Required = true
	require.NoError(t, cfg.Validate())
	o := startObserved(t, cfg, nil, refusal.seam)
	require.Error(t, o.startErr)
	t.Logf("Start: %v", o.startErr)
	require.True(t, strings.HasPrefix(o.startErr.Error(),
		"tokenwire stream probe could not start and streams.required is true: attaching the stream probe to "), o.startErr.Error())
	if len(refusal.order) > 0 {
		require.Contains(t, o.startErr.Error(), "no hook type works on this kernel: "+string(refusal.order[0])+": ")
	}
	// The handshake probe did attach before the stream probe failed.
	attached := o.logs.FilterMessage("tokenwire handshake probe attached").All()
	require.Len(t, attached, 1)
	require.Equal(t, "all", attached[0].ContextMap()["ports"], "no handshake.ports: every port")
	require.Empty(t, o.errorLogs(), "a failed Start reports through its error, not a 'runs without it' line")
	o.shutdown(t)
	requireNothingLoaded(t, base, "a failed Start")
	require.Zero(t, o.metrics.DataPointCount(), "a receiver that failed to start exported data")
}

// TestNoCapabilityStarts: when every enabled capability fails (kprobes,
// which this kernel does not have, and the refused XDP attach), Start
// fails, giving each one's reason, even though none is required.
func TestNoCapabilityStarts(t *testing.T) {
	bpftest.Require(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base := newBaseline(t)
	_, b := bpftest.VethPair(t)

	cfg := createDefaultConfig()
	cfg.HookPreference = []string{"kprobe"}
	nativeXDPOnLoopback(cfg)
	cfg.XDP.Required = false
	require.NoError(t, cfg.Validate())
	o := startObserved(t, cfg, &b, nil)
	if o.startErr == nil {
		o.shutdown(t)
		t.Skip("kprobes work on this kernel: no hook type that fails every probe")
	}
	t.Logf("Start: %v", o.startErr)
	msg := o.startErr.Error()
	require.True(t, strings.HasPrefix(msg, "no tokenwire capability could start:\n"), msg)
	for _, want := range []string{
		"tokenwire handshake probe: attaching the handshake probe: no hook type works on this kernel: kprobe: ",
		"tokenwire stream probe: attaching the stream probe to ",
		`tokenwire XDP filter: xdp: attaching to interface "lo" in native mode: `,
	} {
		require.Contains(t, msg, want)
	}
	require.Empty(t, o.errorLogs())
	o.shutdown(t)
	requireNothingLoaded(t, base, "a failed Start")
}

func TestStartErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("load: the kernel refused tw_hs_fentry: %w", unix.EPERM), "EPERM"},
		// The first errno in the chain: the first hook type refused.
		{fmt.Errorf("no hook type works on this kernel: %w", errors.Join(
			fmt.Errorf("fentry: %w", unix.EPERM), fmt.Errorf("kprobe: %w", unix.ENOENT))), "EPERM"},
		{errors.New("no hook type in the preference list has a program for this capability"), "_OTHER"},
		{fmt.Errorf("create link: %w", unix.EOPNOTSUPP), "EOPNOTSUPP"},
	} {
		require.Equal(t, tc.want, startErrorType(tc.err), "%v", tc.err)
	}
}
