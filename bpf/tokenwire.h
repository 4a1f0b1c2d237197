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

#endif
