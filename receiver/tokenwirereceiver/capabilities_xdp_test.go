package tokenwirereceiver

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
	"github.com/tokenwire/tokenwire/internal/xdp"
)

// nativeXDPOnLoopback configures the XDP filter on lo in native (driver)
// mode, which lo's driver does not have: the kernel refuses the attach.
func nativeXDPOnLoopback(cfg *Config) {
	cfg.XDP.Interfaces = []string{"lo"}
	cfg.XDP.Mode = xdp.ModeNative
}

// TestXDPDownOthersRun: the kernel refuses the XDP filter (xdp.required
// false); both probes run and count one real stream and its handshakes
// exactly, and capability_up says why XDP is down.
func TestXDPDownOthersRun(t *testing.T) {
	bpftest.Require(t)
	_, b := bpftest.VethPair(t) // lo of a namespace of our own
	const streams, events = 3, 5
	srv := teststack.ServeHTTP(t, sseServer(5*time.Millisecond, 2*time.Millisecond, events))
	port := srv.Port // the server's goroutine ends in a cleanup
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base := newBaseline(t)

	cfg := probesOnPort(port)
	nativeXDPOnLoopback(cfg)
	cfg.XDP.Required = false
	require.NoError(t, cfg.Validate())
	o := startObserved(t, cfg, &b, nil)
	require.NoError(t, o.startErr)
	require.Empty(t, b.Link(t, "lo").XDPProgramIDs())

	httpClient := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range streams {
		require.NoError(t, teststack.Fetch(httpClient, "GET", srv.URL+"/", ""))
	}
	client, server := handshakeSeries(port)
	// The handshakes are counted exactly; of the streams, this test only
	// needs to see that the stream probe measures them (their exact counts
	// are the stream tests' job).
	onPort := map[string]any{"server.port": int64(port)}
	require.Eventually(t, func() bool {
		md := lastEmission(o.metrics)
		cl, _ := histogramCount(md, "tokenwire.tcp.handshake.duration", client)
		s, _ := histogramCount(md, "tokenwire.tcp.handshake.duration", server)
		d, _ := histogramCount(md, "gen_ai.server.request.duration", onPort)
		return cl >= streams && s >= streams && d >= 1
	}, 5*time.Second, 20*time.Millisecond)

	up := o.capabilityUp(t)
	require.Equal(t, map[string]upPoint{"stream": {up: 1}, "handshake": {up: 1}, "xdp": {up: 0, errorType: "EOPNOTSUPP"}}, up)
	errs := o.errorLogs()
	require.Len(t, errs, 1, "error logs: %v", errs)
	t.Logf("logged: %s", logLine(errs[0]))
	require.Equal(t, "tokenwire XDP filter could not start; the receiver runs without it", errs[0].Message)
	fields := errs[0].ContextMap()
	require.Equal(t, "xdp", fields["capability"])
	require.Contains(t, fields["error"], `xdp: attaching to interface "lo" in native mode: `)

	o.shutdown(t)
	md := lastEmission(o.metrics)
	for _, attrs := range []map[string]any{client, server} {
		n, _ := histogramCount(md, "tokenwire.tcp.handshake.duration", attrs)
		require.EqualValues(t, streams, n, "one handshake per request: %v", attrs)
	}
	for _, name := range []string{"gen_ai.server.time_to_first_token", "gen_ai.server.request.duration"} {
		n, _ := histogramCount(md, name, onPort)
		require.GreaterOrEqual(t, n, uint64(1), name)
		require.LessOrEqual(t, n, uint64(streams), name)
	}
	chunks, _ := sumValue(md, "tokenwire.stream.chunks", onPort)
	require.Positive(t, chunks)
	_, xdpPoints := sumValue(md, "tokenwire.xdp.packets", nil)
	require.Zero(t, xdpPoints)
	requireNothingLoaded(t, base, "Shutdown")
}

// TestXDPRequiredByDefault: with interfaces named and xdp.required left at
// its default, the same refusal fails Start; the two probes, which had
// attached for real, are released.
func TestXDPRequiredByDefault(t *testing.T) {
	bpftest.Require(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	base := newBaseline(t)
	_, b := bpftest.VethPair(t)

	cfg := createDefaultConfig()
	cfg.HookPreference = bpftest.HookPreference()
	nativeXDPOnLoopback(cfg)
	require.NoError(t, cfg.Validate())
	o := startObserved(t, cfg, &b, nil)
	require.Error(t, o.startErr)
	t.Logf("Start: %v", o.startErr)
	require.True(t, strings.HasPrefix(o.startErr.Error(),
		`tokenwire XDP filter could not start and xdp.required is true: xdp: attaching to interface "lo" in native mode: `), o.startErr.Error())
	require.ErrorIs(t, o.startErr, unix.EOPNOTSUPP)
	require.Len(t, o.logs.FilterMessage("tokenwire handshake probe attached").All(), 1)
	require.Len(t, o.logs.FilterMessage("tokenwire stream probe attached").All(), 1)
	require.Empty(t, o.errorLogs())
	o.shutdown(t)
	require.Empty(t, b.Link(t, "lo").XDPProgramIDs())
	requireNothingLoaded(t, base, "a failed Start")
}
