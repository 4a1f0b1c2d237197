package xdp

import (
	"fmt"

	"github.com/tokenwire/tokenwire/bpf"
)

// Action is what the filter did with a frame.
type Action uint32

// Actions (the kernel's XDP_DROP and XDP_PASS).
const (
	ActionDrop = Action(bpf.XDPActionDrop)
	ActionPass = Action(bpf.XDPActionPass)
)

// String returns the action as the tokenwire.xdp.action attribute spells
// it: "pass" or "drop".
func (a Action) String() string {
	switch a {
	case ActionDrop:
		return "drop"
	case ActionPass:
		return "pass"
	}
	return fmt.Sprintf("action(%d)", uint32(a))
}

// Reason is why the filter did it.
type Reason uint32

// Reasons.
const (
	// ReasonNone: passed, the source is in no blocklist prefix.
	ReasonNone = Reason(bpf.XDPReasonNone)
	// ReasonBlocklist: dropped, the source is in the blocklist and not in
	// the allowlist.
	ReasonBlocklist = Reason(bpf.XDPReasonBlocklist)
	// ReasonMalformed: dropped, the headers are truncated or
	// inconsistent (decided before any list is looked at).
	ReasonMalformed = Reason(bpf.XDPReasonMalformed)
	// ReasonAllowlist: passed, the source is in the blocklist but also in
	// the allowlist, which wins. Traffic from allowlisted sources that the
	// blocklist does not cover is ReasonNone: this reason counts exactly
	// the packets the allowlist saved from a drop.
	ReasonAllowlist = Reason(bpf.XDPReasonAllowlist)
)

// String returns the reason as the tokenwire.xdp.reason attribute spells
// it: "none", "blocklist", "malformed" or "allowlist".
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonBlocklist:
		return "blocklist"
	case ReasonMalformed:
		return "malformed"
	case ReasonAllowlist:
		return "allowlist"
	}
	return fmt.Sprintf("reason(%d)", uint32(r))
}

// verdicts are the (action, reason) pairs the program produces; Counters
// reports each of them for every interface, zero or not, so that a metric
// exists from the start.
var verdicts = [...]struct {
	Action
	Reason
}{
	{ActionPass, ReasonNone},
	{ActionDrop, ReasonBlocklist},
	{ActionDrop, ReasonMalformed},
	{ActionPass, ReasonAllowlist},
}

// counterSlot is the counter array index of (action, reason); the same
// formula as in tokenwire.h (enum tw_xdp_counter_slot).
func counterSlot(a Action, r Reason) uint32 {
	return uint32(a)*bpf.XDPReasonMax + uint32(r)
}

// Counter is the total of one (interface, action, reason) since Open,
// summed over CPUs.
type Counter struct {
	Interface string
	Action    Action
	Reason    Reason
	Packets   uint64
	// Bytes counts whole frames from the Ethernet header on, without FCS.
	Bytes uint64
}

// Counters returns packets and bytes per interface and verdict since Open,
// summed over CPUs. Every verdict of every interface is listed, zeros too.
func (f *Filter) Counters() ([]Counter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrClosed
	}
	var out []Counter
	for _, inst := range f.instances {
		slots, err := inst.read()
		if err != nil {
			return nil, fmt.Errorf("xdp: reading counters of %q: %w", inst.iface, err)
		}
		for _, v := range verdicts {
			s := slots[counterSlot(v.Action, v.Reason)]
			out = append(out, Counter{Interface: inst.iface, Action: v.Action, Reason: v.Reason,
				Packets: s.Packets, Bytes: s.Bytes})
		}
	}
	return out, nil
}

// read sums every counter slot of the instance over CPUs.
func (inst *instance) read() ([bpf.XDPCounterSlots]bpf.XDPCounterValue, error) {
	var (
		out    [bpf.XDPCounterSlots]bpf.XDPCounterValue
		perCPU []bpf.XDPCounterValue
	)
	for slot := range bpf.XDPCounterSlots {
		if err := inst.counters.Lookup(slot, &perCPU); err != nil {
			return out, err
		}
		for _, v := range perCPU {
			out[slot].Packets += v.Packets
			out[slot].Bytes += v.Bytes
		}
	}
	return out, nil
}
