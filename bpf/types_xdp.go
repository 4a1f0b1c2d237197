//go:build linux && amd64

package bpf

// XDP filter layouts and constants (the "XDP filter" section of
// tokenwire.h), under names that do not repeat the generator's prefix.

// XDPCounterValue is one CPU's packets and bytes in a counter slot (struct
// tw_xdp_counter_value).
type XDPCounterValue = XdpFilterTwXdpCounterValue

// Prefix table elements (tokenwire.h, "Prefix tables"): element 0 of a
// table is a head, then come buckets of XDPBucketSlots slots, then the
// length index.
type (
	XDPBucket4 = XdpFilterTwXdpBucket4
	XDPBucket6 = XdpFilterTwXdpBucket6
	XDPHead4   = XdpFilterTwXdpHead4
	XDPHead6   = XdpFilterTwXdpHead6
	XDPIndex4  = XdpFilterTwXdpIndex4
	XDPIndex6  = XdpFilterTwXdpIndex6
)

// Slots of the length index per element (TW_XDP_INDEX4_SLOTS and
// TW_XDP_INDEX6_SLOTS): IPv4 slots are one bitmap, IPv6 slots two.
const (
	XDPIndex4Slots = len(XDPIndex4{}.Lens)
	XDPIndex6Slots = len(XDPIndex6{}.Lens) / 2
)

// XDPBucketSlots is TW_XDP_BUCKET_SLOTS, the slots per bucket (a #define,
// so not in BTF; the bucket types' array lengths are its value).
const XDPBucketSlots = len(XDPBucket4{}.Slot)

// XDP actions (enum tw_xdp_action: the kernel's XDP_* return values).
const (
	XDPActionDrop = uint32(XdpFilterTwXdpActionTW_XDP_ACTION_DROP)
	XDPActionPass = uint32(XdpFilterTwXdpActionTW_XDP_ACTION_PASS)
)

// XDP reasons (enum tw_xdp_reason).
const (
	XDPReasonNone      = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_NONE)
	XDPReasonBlocklist = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_BLOCKLIST)
	XDPReasonMalformed = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_MALFORMED)
	XDPReasonAllowlist = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_ALLOWLIST)
	XDPReasonMax       = uint32(XdpFilterTwXdpReasonTW_XDP_REASON_MAX)
)

// XDPCounterSlots is the size of the per-CPU counter array: one slot per
// (action, reason), slot = action*XDPReasonMax + reason.
const XDPCounterSlots = uint32(XdpFilterTwXdpCounterSlotTW_XDP_COUNTER_SLOTS)
