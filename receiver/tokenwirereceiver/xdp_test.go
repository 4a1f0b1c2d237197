package tokenwirereceiver

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// TestXDPFilterInThePipeline attaches the filter through the receiver to
// one end of a veth pair between two namespaces, sends datagrams from a
// blocklisted source, and checks the exported counts; Shutdown leaves the
// interface without an XDP program.
func TestXDPFilterInThePipeline(t *testing.T) {
	a, b := bpftest.VethPair(t)
	veth := b.Veth(t).Name
	blockfile := filepath.Join(t.TempDir(), "blocklist")
	require.NoError(t, os.WriteFile(blockfile, []byte("# test sender\n"+a.Addr+"\n"), 0o644))

	cfg := xdpOnly(veth, blockfile)
	cfg.XDP.Blocklist = []string{"203.0.113.0/24"}
	require.NoError(t, cfg.Validate())

	sink := new(consumertest.MetricsSink)
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, sink)
	require.NoError(t, err)
	b.Do(t, func() { // the interface is looked up in the calling thread's namespace
		require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))
	})
	stopped := false
	defer func() {
		if !stopped {
			require.NoError(t, r.Shutdown(context.Background()))
		}
	}()
	require.Len(t, b.Veth(t).XDPProgramIDs(), 1)

	const n = 100
	a.Do(t, func() {
		conn, err := net.Dial("udp4", b.Addr+":9")
		require.NoError(t, err)
		defer conn.Close()
		for range n {
			_, err := conn.Write([]byte("blocked"))
			require.NoError(t, err)
		}
	})
	drop := map[string]any{"network.interface.name": veth, "tokenwire.xdp.action": "drop", "tokenwire.xdp.reason": "blocklist"}
	require.Eventually(t, func() bool {
		v, _ := sumValue(lastEmission(sink), "tokenwire.xdp.packets", drop)
		return v >= n
	}, 5*time.Second, 20*time.Millisecond)
	require.NoError(t, r.Shutdown(context.Background()))
	stopped = true

	md := lastEmission(sink)
	packets, _ := sumValue(md, "tokenwire.xdp.packets", drop)
	require.EqualValues(t, n, packets)
	bytes, _ := sumValue(md, "tokenwire.xdp.bytes", drop)
	require.EqualValues(t, n*(14+20+8+len("blocked")), bytes, "Ethernet + IPv4 + UDP + payload per frame")
	malformed, _ := sumValue(md, "tokenwire.xdp.packets", map[string]any{"tokenwire.xdp.reason": "malformed"})
	require.Zero(t, malformed)
	require.Empty(t, b.Veth(t).XDPProgramIDs(), "Shutdown must restore the interface")
}

// TestXDPAllowlistAndRefusedReload: a sender in the blocklist and in the
// allowlist passes, counted as saved by the allowlist; a reloaded file
// with a prefix wider than the policy allows is refused, counted by
// reason, and the blocklist in force stays.
func TestXDPAllowlistAndRefusedReload(t *testing.T) {
	a, b := bpftest.VethPair(t)
	veth := b.Veth(t).Name
	sender := netip.MustParseAddr(a.Addr)
	network := netip.PrefixFrom(sender, 24).Masked()
	blockfile := filepath.Join(t.TempDir(), "blocklist")
	require.NoError(t, os.WriteFile(blockfile, []byte(network.String()+"\n"), 0o644))

	tel := componenttest.NewTelemetry()
	defer tel.Shutdown(context.Background())
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	cfg := xdpOnly(veth, blockfile)
	cfg.XDP.WatchInterval = 100 * time.Millisecond
	cfg.XDP.Allowlist = []string{sender.String()}
	require.NoError(t, cfg.Validate())

	sink := new(consumertest.MetricsSink)
	r, err := NewFactory().CreateMetrics(context.Background(), set, cfg, sink)
	require.NoError(t, err)
	b.Do(t, func() { require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost())) })
	defer func() { require.NoError(t, r.Shutdown(context.Background())) }()

	const n = 50
	send := func() {
		a.Do(t, func() {
			// Unconnected: the receiver's port unreachable replies must
			// not fail the next write.
			conn, err := net.ListenPacket("udp4", a.Addr+":0")
			require.NoError(t, err)
			defer conn.Close()
			to := &net.UDPAddr{IP: net.ParseIP(b.Addr), Port: 9}
			for range n {
				_, err := conn.WriteTo([]byte("allowed"), to)
				require.NoError(t, err)
			}
		})
	}
	saved := map[string]any{"network.interface.name": veth, "tokenwire.xdp.action": "pass", "tokenwire.xdp.reason": "allowlist"}
	dropped := map[string]any{"network.interface.name": veth, "tokenwire.xdp.action": "drop", "tokenwire.xdp.reason": "blocklist"}
	waitPackets := func(want int64) {
		t.Helper()
		require.Eventually(t, func() bool {
			v, _ := sumValue(lastEmission(sink), "tokenwire.xdp.packets", saved)
			return v == want
		}, 5*time.Second, 20*time.Millisecond, "pass/allowlist packets, want %d", want)
		drops, _ := sumValue(lastEmission(sink), "tokenwire.xdp.packets", dropped)
		require.Zero(t, drops)
	}
	send()
	waitPackets(n)
	require.EqualValues(t, 1, telemetryValue(t, tel, "otelcol_receiver_tokenwire_xdp_allowlist_entries", "family", "ipv4"))

	// 10.0.0.0/4 is wider than the default minimum (/8): refused whole.
	require.NoError(t, os.WriteFile(blockfile, []byte(network.String()+"\n10.0.0.0/4\n"), 0o644))
	require.Eventually(t, func() bool {
		return telemetryValue(t, tel, "otelcol_receiver_tokenwire_xdp_reloads", "reason", "policy") == 1
	}, 5*time.Second, 50*time.Millisecond)
	require.EqualValues(t, 0, telemetryValue(t, tel, "otelcol_receiver_tokenwire_xdp_reloads", "result", "ok"))
	require.EqualValues(t, 1, telemetryValue(t, tel, "otelcol_receiver_tokenwire_xdp_blocklist_entries", "family", "ipv4"),
		"the blocklist in force stays")
	send()
	waitPackets(2 * n)
}

// telemetryValue sums the points of the receiver's own metric name whose
// attribute key has value.
func telemetryValue(t *testing.T, tel *componenttest.Telemetry, name, key, value string) int64 {
	t.Helper()
	m, err := tel.GetMetric(name)
	if err != nil {
		return -1
	}
	var points []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	}
	var total int64
	for _, dp := range points {
		if v, ok := dp.Attributes.Value(attribute.Key(key)); ok && v.AsString() == value {
			total += dp.Value
		}
	}
	return total
}

// xdpOnly is the configuration with the XDP filter alone on iface, its
// blocklist file at blockfile, emitting every 100 ms.
func xdpOnly(iface, blockfile string) *Config {
	cfg := createDefaultConfig()
	cfg.CollectionInterval = 100 * time.Millisecond
	cfg.Handshake.Enabled = false
	cfg.Streams.Enabled = false
	cfg.XDP.Interfaces = []string{iface}
	cfg.XDP.BlocklistFile = blockfile
	return cfg
}
