/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Record layouts shared by the BPF programs and the Go side.
 *
 * bpf2go turns every struct here into a Go type (-type), so a layout lives in
 * this file only. Keep fields naturally aligned and padding explicit: the Go
 * decoder relies on the exact size.
 */
#ifndef TOKENWIRE_H
#define TOKENWIRE_H

/* Role of the local socket in a TCP handshake. */
enum tw_role {
	TW_ROLE_CLIENT = 1, /* connect(): SYN sent -> ESTABLISHED */
	TW_ROLE_SERVER = 2, /* passive open: SYN-ACK sent -> ESTABLISHED */
};

/* Flags of a handshake_event. */
enum tw_handshake_flag {
	/* The handshake failed; errno holds the socket error (0: the
	 * application closed the socket before the handshake finished). */
	TW_HS_FAILED = 1 << 0,
	/* The server-side duration is unknown (no SYN-ACK timing kept by the
	 * kernel, e.g. a SYN cookie without timestamps). */
	TW_HS_NO_DURATION = 1 << 1,
	/* The server-side duration comes from total_rto_time (millisecond
	 * resolution) because the SYN-ACK was retransmitted. */
	TW_HS_SYNACK_RETRANSMITTED = 1 << 2,
};

/* One finished (or failed) handshake, sent through the ring buffer. */
struct handshake_event {
	__u64 duration_ns; /* 0 when failed or unknown */
	__u32 pid;         /* tgid of connect() caller (client role only) */
	__u32 errno_;      /* socket error of a failed handshake */
	__u8 saddr[16];    /* local address; IPv4 in the first 4 bytes */
	__u8 daddr[16];    /* remote address */
	__u16 sport;       /* local port, host order */
	__u16 dport;       /* remote port, host order */
	__u16 family;      /* AF_INET or AF_INET6 */
	__u8 role;         /* enum tw_role */
	__u8 flags;        /* enum tw_handshake_flag */
	__u32 retransmits; /* SYN (client) or SYN-ACK (server) retransmits */
	__u32 _pad;
};

/* Indexes of the per-CPU counter array shared by every program. */
enum tw_counter {
	TW_COUNTER_RINGBUF_LOST = 0,     /* bpf_ringbuf_reserve failed */
	TW_COUNTER_HANDSHAKE_UNTRACKED,  /* SYN_SENT socket not found at its end */
	TW_COUNTER_MAX,
};

/* ===================================================================== *
 * XDP filter (xdp_filter.bpf.c, internal/xdp)
 * ===================================================================== */

/* What the filter did with a frame. The values are those of the kernel's
 * enum xdp_action, so a verdict's action is the program's return value. */
enum tw_xdp_action {
	TW_XDP_ACTION_ABORTED = 0, /* never returned; keeps the values aligned */
	TW_XDP_ACTION_DROP = 1,    /* XDP_DROP */
	TW_XDP_ACTION_PASS = 2,    /* XDP_PASS */
	TW_XDP_ACTION_MAX,
};

/* Why the filter did it. */
enum tw_xdp_reason {
	TW_XDP_REASON_NONE = 0,  /* passed: nothing wrong with it */
	TW_XDP_REASON_BLOCKLIST, /* source address in the blocklist */
	TW_XDP_REASON_MALFORMED, /* headers truncated or inconsistent */
	TW_XDP_REASON_MAX,
};

/* Key of the per-CPU counter array: slot = action * TW_XDP_REASON_MAX +
 * reason, so each (action, reason) pair has its own slot and the hot path
 * needs no hashing. TW_XDP_COUNTER_SLOTS is the array's size. Go computes
 * the same slot (internal/xdp counterSlot); the table tests prove the two
 * agree because they assert exact deltas per (action, reason). */
enum tw_xdp_counter_slot {
	TW_XDP_COUNTER_SLOTS = TW_XDP_ACTION_MAX * TW_XDP_REASON_MAX,
};

/* Value of a counter slot, one per CPU: frames and their bytes (the frame
 * as XDP sees it, from the Ethernet header to the end, without FCS). */
struct tw_xdp_counter_value {
	__u64 packets;
	__u64 bytes;
};

/* Keys of the blocklist LPM tries: prefix length in bits, then the
 * address in network byte order (the layout BPF_MAP_TYPE_LPM_TRIE wants). */
struct tw_xdp_lpm4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct tw_xdp_lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

#endif
