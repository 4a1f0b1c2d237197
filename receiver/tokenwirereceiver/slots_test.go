package tokenwirereceiver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/internal/probe"
)

// TestStateSlotsReachTheProbe: streams.state_slots decides where the
// stream probe keeps connection state, as its startup line says: 0 keeps
// it in socket storage alone; the default puts it behind slots wherever
// the kernel has BPF atomics and the state is in socket storage.
func TestStateSlotsReachTheProbe(t *testing.T) {
	bpftest.Require(t)
	for _, slots := range []int{0, 8192} {
		t.Run(fmt.Sprintf("state_slots=%d", slots), func(t *testing.T) {
			cfg := probesOnPort(9)
			cfg.Streams.StateSlots = slots
			require.NoError(t, cfg.Validate())
			o := startObserved(t, cfg, nil, nil)
			require.NoError(t, o.startErr)
			lines := o.logs.FilterMessage("tokenwire stream probe attached").All()
			require.Len(t, lines, 1)
			state, ok := lines[0].ContextMap()["state"].(string)
			require.True(t, ok, "no state in %v", lines[0].ContextMap())
			t.Logf("state_slots %d: state %q", slots, state)
			switch {
			case strings.HasPrefix(state, "map"):
				// Untyped hooks or 5.10: no socket storage, no slots.
			case slots == 0 || !probe.HaveAtomics():
				require.Equal(t, "socket storage", state)
			default:
				require.Equal(t, "socket storage, behind slots", state)
			}
			o.shutdown(t)
		})
	}
}
