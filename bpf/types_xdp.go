//go:build linux && amd64

package bpf

// XDP filter layouts and constants (the "XDP filter" section of
// tokenwire.h), under names that do not repeat the generator's prefix.

// XDPCounterValue is one CPU's packets and bytes in a counter slot (struct
// tw_xdp_counter_value).
type XDPCounterValue = XdpFilterTwXdpCounterValue

// XDPLPM4Key and XDPLPM6Key are the blocklist tries' keys: prefix length,
// then the address in network byte order (struct tw_xdp_lpm4_key,
// struct tw_xdp_lpm6_key).
type (
	XDPLPM4Key = XdpFilterTwXdpLpm4Key
	XDPLPM6Key = XdpFilterTwXdpLpm6Key
)

// XDP actions (enum tw_xdp_action: the kernel's XDP_* return values).
const (
	XDPActionDrop = uint32(XdpFilterTwXdpActionTW_XDP_ACTION_DROP)
	XDPActionPass = uint32(XdpFilterTwXdpActionTW_XDP_ACTION_PASS)
	XDPActionMax  = uint32(XdpFilterTwXdpActionTW_XDP_ACTION_MAX)
)

// XDP reasons (enum tw_xdp_reason).
const (
	XDPReasonNone      = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_NONE)
	XDPReasonBlocklist = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_BLOCKLIST)
	XDPReasonMalformed = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_MALFORMED)
	XDPReasonMax       = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_MAX)
)

// XDPCounterSlots is the size of the per-CPU counter array: one slot per
// (action, reason), slot = action*XDPReasonMax + reason.
const XDPCounterSlots = uint32(XdpFilterTwXdpCounterSlotTW_XDP_COUNTER_SLOTS)
