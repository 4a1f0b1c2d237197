package tokenwirereceiver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

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

	cfg := createDefaultConfig()
	cfg.CollectionInterval = 100 * time.Millisecond
	cfg.Handshake.Enabled = false
	cfg.Streams.Enabled = false
	cfg.XDP.Interfaces = []string{veth}
	cfg.XDP.BlocklistFile = blockfile
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
