//go:build e2e

package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// The streaming workload. Its timing is what the metrics must show.
const (
	streamsPort = 8000 // first of config.yaml's default streams ports (vLLM)
	chatPath    = "/v1/chat/completions"

	think    = 150 * time.Millisecond // request -> first event: the TTFT
	interval = 20 * time.Millisecond  // between events: the chunk interval
	events   = 10                     // events per stream: the chunks

	warmStreams  = 2  // before the measured wave, so rate() has a baseline
	mainStreams  = 20 // the measured wave, concurrent, each with a traceparent
	plainReplies = 3  // non-streamed (Content-Length) responses: not streams

	warmFailedStreams = 1 // streams that end in an error (failedServer)
	failedStreams     = 2

	warmConnects = 5  // handshakes before the measured wave
	mainConnects = 50 // handshakes in the measured wave
	refused      = 5  // connects to a closed port

	// Frames written into the XDP filter's veth in each wave.
	xdpBlocked   = 7 // IPv4 from the blocklisted 198.51.100.0/24: drop, blocklist
	xdpMalformed = 3 // IPv4 header length below 20 bytes: drop, malformed
	xdpARP       = 4 // ARP requests: pass, none
)

// Tolerances, from the histograms' bucket bounds
// (receiver/tokenwirereceiver/histograms.go) and from what a loaded 2-core
// machine adds to a sleep.
const (
	// histogram_quantile only knows buckets: with every TTFT (150 ms plus
	// scheduling) in the bucket (0.1, 0.25], any p50 in that bucket is
	// right (it interpolates to 0.175 when all are there).
	ttftBucketLow, ttftBucketHigh = 0.1, 0.25
	// The chunk interval's bucket around 20 ms is (0.01, 0.025]; on a
	// loaded machine half the sleeps can run 5 ms over, into (0.025, 0.05].
	gapBucketLow, gapBucketHigh = 0.01, 0.05
	// Kernel timings are bounded on both sides without a guess at the
	// machine's load: from below by the server's sleeps (relative sleeps:
	// every interval is at least 20 ms, less this for where in the write
	// the probe stamps it), from above by what the client saw of the same
	// stream (streamResult) or by the stream's other timings.
	gapSlack = time.Millisecond
	// Handshakes on loopback take tens of microseconds; 5 ms is far above
	// that and far below a retransmission (1 s).
	loopbackHandshakeMax = 0.005
	// A SYN retransmission waits the initial RTO (TCP_TIMEOUT_INIT).
	initialRTO = time.Second
)

// TestStack runs tokenwire the way a user adopts it and checks what lands
// in Prometheus, in a trace backend, in the Grafana dashboard's queries and
// in the alert rules, against a workload with known timing.
func TestStack(t *testing.T) {
	began := time.Now()
	if os.Geteuid() != 0 {
		t.Fatal("the e2e test loads BPF programs through the collector: run it as root (make e2e)")
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	collectorBin := lookBin(t, "TOKENWIRE_COLLECTOR", filepath.Join(repo, "_build", "tokenwire"), "build it with `make build`")
	promBin := lookBin(t, "TOKENWIRE_PROMETHEUS", "prometheus", "install Debian's prometheus package (`make e2e` does)")
	rulesFile := filepath.Join(repo, "examples", "prometheus", "alerts.yaml")
	dashboard := filepath.Join(repo, "deploy", "grafana", "tokenwire.json")

	// The default config.yaml's fixed ports, and the streams port.
	requirePortsFree(t, map[int]string{
		streamsPort: "the test's streaming server",
		8888:        "collector self-telemetry",
		8889:        "prometheus exporter",
		13133:       "health_check",
	})
	dir := t.TempDir()

	// A model name unique to this run: every stream series the test
	// checks carries it, so nothing else on the host can change them. The
	// failing streams name another.
	model := "e2e-" + randomHex(4)
	byModel := selector("gen_ai_request_model", model)
	failedModel := model + "-failed"

	// The streaming server first: connections made before the probe is
	// attached would be missed, none are made before.
	server := newServer(think, interval, events, model)
	failed := failedServer(think, interval, failedModel)
	httpServer, err := teststack.StartHTTP(fmt.Sprintf("127.0.0.1:%d", streamsPort), workload(server, failed))
	if err != nil {
		t.Fatalf("streaming server: %v", err)
	}
	t.Cleanup(func() { httpServer.Shutdown(5 * time.Second) })
	chatURL := fmt.Sprintf("http://127.0.0.1:%d%s", streamsPort, chatPath)

	// The XDP filter's interface: the test's own veth pair.
	xl := newXDPLink(t)

	// The trace backend: a second collector, OTLP in, JSON file out.
	otlpAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	spansFile := filepath.Join(dir, "spans.json")
	env := []string{"TOKENWIRE_E2E_OTLP_ENDPOINT=" + otlpAddr, "TOKENWIRE_E2E_SPANS_FILE=" + spansFile,
		"TOKENWIRE_E2E_XDP_IF=" + xl.rootIf}
	sink := startProc(t, dir, "sink-collector", env, collectorBin, "--config", filepath.Join(repo, "e2e", "testdata", "sink.yaml"))
	waitReady(t, sink, 30*time.Second, "OTLP listener", teststack.TCPListening(otlpAddr))

	// The collector under test: config.yaml as shipped, plus a traces
	// exporter to the sink and the XDP filter on the test's veth
	// (testdata/traces-overlay.yaml).
	collector := startProc(t, dir, "collector", env, collectorBin,
		"--config", filepath.Join(repo, "config.yaml"),
		"--config", filepath.Join(repo, "e2e", "testdata", "traces-overlay.yaml"))
	waitReady(t, collector, 60*time.Second, "healthy health_check", teststack.HTTPOK("http://127.0.0.1:13133/"))

	prom := startPrometheus(t, dir, promBin, rulesFile)
	prom.waitValue(t, `sum(up{job=~"tokenwire|tokenwire-self"})`, 2, 30*time.Second)
	t.Logf("stack up after %s", time.Since(began).Round(time.Millisecond))

	// Handshake targets: a listener that accepts and closes, and a port
	// nothing listens on.
	listener, lport := teststack.AcceptAndClose(t)
	refusedPort := freePort(t)

	// Warm-up: the series exist before the measured wave, as they would in
	// a running system, so that rate() and increase() see the wave (a
	// series' first sample is not an increase).
	warm, err := chatMany(chatURL, model, warmStreams, true, false)
	if err != nil {
		t.Fatalf("warm-up streams: %v", err)
	}
	checkClientSaw(t, warm, events)
	warmFailed, err := chatMany(chatURL+"?fail=1", failedModel, warmFailedStreams, true, false)
	if err != nil {
		t.Fatalf("warm-up failing streams: %v", err)
	}
	checkClientSaw(t, warmFailed, failed.Events)
	if err := connectN(listener.Addr().String(), warmConnects); err != nil {
		t.Fatalf("warm-up connects: %v", err)
	}
	xl.send(t, xdpBlocked, xdpMalformed, xdpARP)
	xdpSel := func(action, reason string) string {
		return selector("network_interface_name", xl.rootIf, "tokenwire_xdp_action", action, "tokenwire_xdp_reason", reason)
	}
	prom.waitValue(t, "sum(gen_ai_server_time_to_first_token_seconds_count"+byModel+")", warmStreams, 30*time.Second)
	prom.waitValue(t, "sum(tokenwire_tcp_handshake_duration_seconds_count"+
		selector("network_tcp_handshake_role", "client", "server_port", strconv.Itoa(lport))+")", warmConnects, 30*time.Second)
	prom.waitValue(t, "sum(tokenwire_xdp_packets_total"+xdpSel("drop", "blocklist")+")", xdpBlocked, 30*time.Second)
	t.Logf("warm-up visible in Prometheus after %s", time.Since(began).Round(time.Millisecond))

	// The measured wave, all at once.
	var (
		wg                sync.WaitGroup
		mainRes           []streamResult
		mainErr, plainErr error
		failedRes         []streamResult
		failedErr         error
		connErr, refErr   error
		slowPort          int
		slowDur           time.Duration
		slowErr           error
		plainRes          []streamResult
		waveStart         = time.Now()
		refusedAddr       = "127.0.0.1:" + strconv.Itoa(refusedPort)
		listenerAddr      = listener.Addr().String()
	)
	wg.Go(func() { mainRes, mainErr = chatMany(chatURL, model, mainStreams, true, true) })
	wg.Go(func() { plainRes, plainErr = chatMany(chatURL, model, plainReplies, false, false) })
	wg.Go(func() { failedRes, failedErr = chatMany(chatURL+"?fail=1", failedModel, failedStreams, true, false) })
	wg.Go(func() { connErr = connectN(listenerAddr, mainConnects) })
	wg.Go(func() { refErr = connectRefused(refusedAddr, refused) })
	wg.Go(func() { slowPort, slowDur, slowErr = slowHandshake() })
	xl.send(t, xdpBlocked, xdpMalformed, xdpARP)
	wg.Wait()
	for what, err := range map[string]error{"streams": mainErr, "plain replies": plainErr, "failing streams": failedErr,
		"connects": connErr, "refused connects": refErr, "slow handshake": slowErr} {
		if err != nil {
			t.Fatalf("measured wave: %s: %v", what, err)
		}
	}
	checkClientSaw(t, mainRes, events)
	checkClientSaw(t, failedRes, failed.Events)
	for _, r := range plainRes {
		if r.Status != 200 {
			t.Fatalf("plain reply: status %d", r.Status)
		}
	}
	t.Logf("measured wave took %s; slow handshake %s (client side)", time.Since(waveStart).Round(time.Millisecond), slowDur.Round(time.Millisecond))

	totalStreams := warmStreams + mainStreams
	prom.waitValue(t, "sum(gen_ai_server_time_to_first_token_seconds_count"+byModel+")", float64(totalStreams), 30*time.Second)
	prom.waitValue(t, "sum(tokenwire_tcp_handshake_duration_seconds_count"+
		selector("network_tcp_handshake_role", "client", "server_port", strconv.Itoa(lport))+")", warmConnects+mainConnects, 30*time.Second)
	prom.waitValue(t, "sum(tokenwire_tcp_handshake_failures_total"+
		selector("server_port", strconv.Itoa(refusedPort))+")", refused, 30*time.Second)
	prom.waitValue(t, "sum(tokenwire_tcp_handshake_duration_seconds_count"+
		selector("network_tcp_handshake_role", "client", "server_port", strconv.Itoa(slowPort))+")", 2, 30*time.Second)
	prom.waitValue(t, `sum(otelcol_receiver_tokenwire_streams_skipped{reason="not_streamed"})`, plainReplies, 30*time.Second)
	prom.waitValue(t, "sum(tokenwire_xdp_packets_total"+xdpSel("drop", "blocklist")+")", 2*xdpBlocked, 30*time.Second)
	t.Logf("measured wave visible in Prometheus after %s", time.Since(began).Round(time.Millisecond))

	// Grafana's $__rate_interval for a panel showing the whole test: the
	// window reaches back before the warm-up's first sample.
	window := time.Since(began).Round(time.Second) + 30*time.Second
	// A few more scrapes, so the last value is in more than one sample.
	time.Sleep(2 * time.Second)

	t.Run("streams", func(t *testing.T) {
		checkStreams(t, prom, byModel, append(append([]streamResult{}, warm...), mainRes...), streamBytes(server), window)
	})
	t.Run("handshakes", func(t *testing.T) {
		checkHandshakes(t, prom, lport, refusedPort, slowPort, slowDur, totalStreams+plainReplies+warmFailedStreams+failedStreams)
	})
	t.Run("genai", func(t *testing.T) {
		checkGenAI(t, prom, model, failedModel, append(append([]streamResult{}, warm...), mainRes...))
	})
	t.Run("xdp", func(t *testing.T) {
		checkXDP(t, prom, xl.rootIf, xdpSel)
	})
	t.Run("self-telemetry", func(t *testing.T) {
		checkSelfTelemetry(t, prom)
	})
	t.Run("dashboard", func(t *testing.T) {
		checkDashboard(t, prom, dashboard, window)
	})
	t.Run("alert rules", func(t *testing.T) {
		checkRules(t, prom, promBin, rulesFile)
	})
	t.Run("traces", func(t *testing.T) {
		checkTraces(t, spansFile, model, warm, mainRes, streamBytes(server))
		checkFailedSpans(t, spansFile, failedModel, warmFailedStreams+failedStreams)
	})
	t.Logf("e2e checks done after %s", time.Since(began).Round(time.Millisecond))
}

// checkClientSaw fails unless every stream delivered all its events and
// [DONE] to the client: otherwise the workload, not tokenwire, is broken.
func checkClientSaw(t *testing.T, rs []streamResult, events int) {
	t.Helper()
	for i, r := range rs {
		if r.Status != 200 || r.Events != events || !r.Done {
			t.Fatalf("stream %d: status %d, %d events, done %v; want 200, %d events, done", i, r.Status, r.Events, r.Done, events)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// within checks lo <= got <= hi.
func within(t *testing.T, what string, got, lo, hi float64) {
	t.Helper()
	if math.IsNaN(got) || got < lo || got > hi {
		t.Errorf("%s = %.6g, want within [%.6g, %.6g]", what, got, lo, hi)
	} else {
		t.Logf("%s = %.6g (want [%.6g, %.6g])", what, got, lo, hi)
	}
}

// equal checks got == want for counts.
func equal(t *testing.T, what string, got, want float64) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	} else {
		t.Logf("%s = %v", what, got)
	}
}

// value runs a single-sample query, failing the test on error.
func value(t *testing.T, prom *promClient, expr string) float64 {
	t.Helper()
	v, err := prom.scalar(expr)
	if err != nil {
		t.Errorf("%v", err)
		return math.NaN()
	}
	return v
}

func checkHandshakes(t *testing.T, prom *promClient, lport, refusedPort, slowPort int, slowDur time.Duration, httpConns int) {
	hs := func(role string, port int) string {
		return selector("network_tcp_handshake_role", role, "server_port", strconv.Itoa(port))
	}
	n := float64(warmConnects + mainConnects)
	equal(t, "client handshakes to the listener", value(t, prom, "sum(tokenwire_tcp_handshake_duration_seconds_count"+hs("client", lport)+")"), n)
	equal(t, "server handshakes on the listener", value(t, prom, "sum(tokenwire_tcp_handshake_duration_seconds_count"+hs("server", lport)+")"), n)
	// Keep-alive is off: one handshake per HTTP request, on both sides.
	equal(t, "client handshakes to :8000", value(t, prom, "sum(tokenwire_tcp_handshake_duration_seconds_count"+hs("client", streamsPort)+")"), float64(httpConns))
	equal(t, "server handshakes on :8000", value(t, prom, "sum(tokenwire_tcp_handshake_duration_seconds_count"+hs("server", streamsPort)+")"), float64(httpConns))
	for _, role := range []string{"client", "server"} {
		within(t, role+" handshake p50 on loopback (s)", value(t, prom,
			"histogram_quantile(0.5, sum by (le) (tokenwire_tcp_handshake_duration_seconds_bucket"+hs(role, lport)+"))"),
			0, loopbackHandshakeMax)
	}
	equal(t, "refused handshakes", value(t, prom, "sum(tokenwire_tcp_handshake_failures_total"+
		selector("network_tcp_handshake_role", "client", "error_type", "refused", "server_port", strconv.Itoa(refusedPort))+")"), refused)

	// The slow listener: one fast handshake and one that waited for a SYN
	// retransmission; the kernel's time for it matches the client's.
	slowSel := hs("client", slowPort)
	equal(t, "handshakes to the slow listener", value(t, prom, "sum(tokenwire_tcp_handshake_duration_seconds_count"+slowSel+")"), 2)
	equal(t, "of which under 0.5 s", value(t, prom, "sum(tokenwire_tcp_handshake_duration_seconds_bucket"+mergeSel(slowSel, `le="0.5"`)+")"), 1)
	// The sum holds the slow one plus a loopback handshake (microseconds):
	// at least the retransmission's wait, at most the client's connect().
	within(t, "slow handshake, kernel-measured (s)", value(t, prom, "sum(tokenwire_tcp_handshake_duration_seconds_sum"+slowSel+")"),
		initialRTO.Seconds(), slowDur.Seconds()+loopbackHandshakeMax)
}

// checkXDP checks the XDP filter's counts for the frames both waves wrote
// into its veth: exact, per action and reason.
func checkXDP(t *testing.T, prom *promClient, ifname string, sel func(action, reason string) string) {
	for _, c := range []struct {
		action, reason string
		frames         int
	}{
		{"drop", "blocklist", 2 * xdpBlocked},
		{"drop", "malformed", 2 * xdpMalformed},
		{"pass", "none", 2 * xdpARP},
	} {
		equal(t, "XDP packets "+c.action+"/"+c.reason, value(t, prom, "sum(tokenwire_xdp_packets_total"+sel(c.action, c.reason)+")"), float64(c.frames))
		equal(t, "XDP bytes "+c.action+"/"+c.reason, value(t, prom, "sum(tokenwire_xdp_bytes_total"+sel(c.action, c.reason)+")"), float64(c.frames*frameLen))
	}
	equal(t, "XDP programs attached", value(t, prom, "sum(otelcol_receiver_tokenwire_programs_attached"+
		selector("capability", "xdp", "interface", ifname)+")"), 1)
	equal(t, "XDP blocklist entries (ipv4)", value(t, prom, `sum(otelcol_receiver_tokenwire_xdp_blocklist_entries{family="ipv4"})`), 1)
}

func checkSelfTelemetry(t *testing.T, prom *promClient) {
	for _, c := range []string{"handshake", "stream"} {
		sel := selector("capability", c)
		equal(t, "records lost ("+c+")", value(t, prom, "sum(otelcol_receiver_tokenwire_records_lost"+sel+")"), 0)
		if v := value(t, prom, "sum(otelcol_receiver_tokenwire_records_read"+sel+")"); !(v > 0) {
			t.Errorf("records read (%s) = %v, want > 0", c, v)
		}
		if _, err := prom.scalar("sum(otelcol_receiver_tokenwire_map_entries" + sel + ")"); err != nil {
			t.Errorf("map entries (%s): %v", c, err)
		}
	}
	equal(t, "handshake programs attached", value(t, prom, `sum(otelcol_receiver_tokenwire_programs_attached{capability="handshake"})`), 1)
	// This kernel (shared/KERNEL.md) refuses fentry, so every stream hook
	// point attaches as tp_btf, the next type in the default order.
	equal(t, "stream hook points attached", value(t, prom, `count(otelcol_receiver_tokenwire_programs_attached{capability="stream",hook="tp_btf"})`), 4)
	equal(t, "streams open after the workload", value(t, prom, "sum(otelcol_receiver_tokenwire_streams_open)"), 0)
	equal(t, "non-streamed replies skipped", value(t, prom, `sum(otelcol_receiver_tokenwire_streams_skipped{reason="not_streamed"})`), plainReplies)
	if s, err := prom.query("otelcol_receiver_tokenwire_stream_evictions"); err != nil || hasData(s) && s[0].Value != 0 {
		t.Errorf("stream evictions: %v %v, want none", s, err)
	}
}
