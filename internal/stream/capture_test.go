package stream

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/teststack"
)

// A request the server reads in one read of several slices (20 KiB and a
// tail) is captured whole and in order up to the budget: whole slices in
// the loop, the tail after it.
func TestLargeRequestInOneReadIsCaptured(t *testing.T) {
	bpftest.Require(t)
	body := strings.Repeat("0123456789abcdef", 20<<10/16) + "tail"
	request := fmt.Sprintf("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	for _, budget := range []int{64 << 10, 8 << 10} {
		t.Run(fmt.Sprintf("budget=%d", budget), func(t *testing.T) {
			port := teststack.ServeOne(t, func(c *net.TCPConn) {
				buf := make([]byte, 64<<10)
				waitQueued(c, buf, len(request))
				if n, err := c.Read(buf); err != nil || n != len(request) {
					t.Errorf("the server read %d bytes (%v), want the request's %d in one read", n, err, len(request))
				}
				answerOneEvent(c)
			})
			cfg := testConfig(port)
			cfg.RequestCaptureBytes = uint32(budget)
			want := request[:min(budget, len(request))]
			_, rec := traceWith(t, cfg)
			if got := capturedRequest(t, rec, port, request); string(got) != want {
				t.Errorf("captured %d bytes, want the first %d of the request in order (got == want: %v)", len(got), len(want), string(got) == want)
			}
		})
	}
}
