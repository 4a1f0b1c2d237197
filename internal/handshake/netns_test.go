package handshake

import (
	"net"
	"testing"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// TestHandshakeAcrossNamespaces connects over a veth pair between two
// network namespaces: both sides are seen, with the right addresses.
func TestHandshakeAcrossNamespaces(t *testing.T) {
	a, b := bpftest.VethPair(t)
	var ln net.Listener
	b.Do(t, func() {
		var err error
		if ln, err = net.Listen("tcp4", b.Addr+":0"); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { ln.Close() })
	acceptAll(ln)
	port := uint16(ln.Addr().(*net.TCPAddr).Port)

	tr, err := Open(defaultConfig(port))
	if err != nil {
		t.Fatal(err)
	}
	c := collect(t, tr)
	const n = 10
	a.Do(t, func() {
		for range n {
			conn, err := net.Dial("tcp4", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
		}
	})
	for _, role := range []Role{RoleClient, RoleServer} {
		got := c.waitFor(t, n, func(e *Event) bool { return e.Role == role })
		if len(got) != n {
			t.Fatalf("%d %s handshakes, want %d", len(got), role, n)
		}
		for _, e := range got {
			local, remote := a.Addr, b.Addr
			if role == RoleServer {
				local, remote = b.Addr, a.Addr
			}
			if e.Local.Addr().String() != local || e.Remote.Addr().String() != remote || e.Failed || !e.HasDuration {
				t.Errorf("%s event %+v: want %s -> %s, successful", role, e, local, remote)
			}
		}
	}
}
