package handshake

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/hook"
)

// TestEveryHookTypeOrAClearRefusal attaches each hook type on its own. A
// type the kernel is expected to accept (bpftest.ExpectedHooks) must
// attach where the kernel has its target and see real handshakes; one it
// refuses must say which hook type failed and why.
func TestEveryHookTypeOrAClearRefusal(t *testing.T) {
	bpftest.RequireTracefs(t)
	expected := bpftest.ExpectedHooks(t)
	target := bpftest.Target{Group: tracepointGroup, Tracepoint: tracepointName, Function: kernelFunc}
	for _, k := range hook.DefaultOrder {
		t.Run(string(k), func(t *testing.T) {
			ln, port := listen(t, "tcp4", "127.0.0.1:0")
			acceptAll(ln)
			cfg := defaultConfig(port)
			cfg.HookOrder = []hook.Kind{k}
			tr, err := Open(cfg)
			if err != nil {
				bpftest.LogHookMatrix(t, "handshake", HookPoint, k, hook.Choice{Refused: []hook.Attempt{{Kind: k, Err: err}}})
				if !strings.Contains(err.Error(), string(k)+":") {
					t.Fatalf("refusal does not name the hook type: %v", err)
				}
				if slices.Contains(expected, k) && bpftest.KernelHas(t, k, target) {
					t.Fatalf("%s must attach on this kernel: %v", k, err)
				}
				t.Logf("refused here: %v", err)
				return
			}
			bpftest.LogHookMatrix(t, "handshake", HookPoint, k, tr.Hook())
			if got := tr.Hook().Kind; got != k {
				t.Fatalf("attached %s, want %s", got, k)
			}
			c := collect(t, tr)
			conn, err := net.Dial("tcp4", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			got := c.waitFor(t, 2, func(e *Event) bool { return e.ServerPort() == port })
			if len(got) != 2 || got[0].Role == got[1].Role {
				t.Fatalf("via %s: %d events %+v, want one client and one server handshake", k, len(got), got)
			}
		})
	}
}

// TestHooksInUse logs what attached with the tests' hook order, for the
// kernel matrix (see bpftest.HookOrderEnv).
func TestHooksInUse(t *testing.T) {
	bpftest.Require(t)
	tr, err := Open(defaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	bpftest.LogHooks(t, "handshake", HookPoint, tr.Hook())
}
