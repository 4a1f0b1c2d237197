/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Record layouts shared by the BPF programs and the Go side.
 *
 * bpf2go turns every struct here into a Go type (-type), so a layout lives in
 * this file only. Keep fields naturally aligned and padding explicit: the Go
 * decoder relies on the exact size.
 */
#ifndef TOKENWIRE_H
#define TOKENWIRE_H

/* A TCP connection's endpoints, as every record that names one carries
 * them. Ports in host order; an IPv4 address sits in the first 4 bytes. */
struct tw_endpoints {
	__u8 saddr[16];    /* local address */
	__u8 daddr[16];    /* remote address */
	__u16 sport;       /* local port */
	__u16 dport;       /* remote port */
	__u16 family;      /* AF_INET or AF_INET6 */
	__u16 _pad;
};

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
	struct tw_endpoints ep;
	__u8 role;         /* enum tw_role */
	__u8 flags;        /* enum tw_handshake_flag */
	__u16 _pad;
	__u32 retransmits; /* SYN (client) or SYN-ACK (server) retransmits */
};

/* Indexes of the per-CPU counter array shared by every program. */
enum tw_counter {
	TW_COUNTER_RINGBUF_LOST = 0,     /* bpf_ringbuf_reserve failed */
	TW_COUNTER_HANDSHAKE_UNTRACKED,  /* SYN_SENT socket not found at its end */
	TW_COUNTER_MAX,
};

/* =====================================================================
 * Streams (stream.bpf.c)
 * ===================================================================== */

#define TW_PEEK_MAX 512      /* bytes of a body write a record carries (a head's: TW_HEAD_MAX) */
#define TW_REQ_SLICE 4096    /* bytes of a request a record carries */
#define TW_GAP_BUCKETS 17    /* chunk-interval histogram: 16 bounds + overflow */

/* Where a stream is in its life, per server socket. */
enum tw_stream_state {
	TW_ST_IDLE = 0,     /* connected, no request in flight */
	TW_ST_REQUEST = 1,  /* request bytes arrived, no response yet */
	TW_ST_RESPONSE = 2, /* response started */
};

/* Record kinds (first field of every stream record after the id). */
enum tw_stream_record {
	TW_REC_REQUEST = 1,  /* a slice of the request's bytes */
	TW_REC_RESPONSE = 2, /* the start of the response's first write: its head, and what follows */
	TW_REC_PROGRESS = 3, /* chunk-interval counts so far, for long streams */
	TW_REC_END = 4,      /* the stream ended */
	TW_REC_CHUNK = 5,    /* one body chunk (only with chunk_records on) */
	TW_REC_BODY = 6,     /* bytes of a body write: the first, or one that may end the stream */
	TW_REC_TLS_PROC = 7, /* a process unknown to user space read a TLS ClientHello on a watched port, or sent one to a client port (pid, comm) */
	TW_REC_TLS_HELLO = 8, /* the ClientHello a client connection began with (its first TW_REQ_SLICE bytes): its server name */
};

/* Flags of a BODY record (in reason). */
enum tw_body_flag {
	TW_BODY_FIRST = 1 << 0, /* the start of the first body write */
	TW_BODY_TAIL = 1 << 1,  /* the end of a write whose last bytes look like an event that ends a stream */
};

/* Why a stream ended. */
enum tw_end_reason {
	TW_END_TERMINATOR = 1,   /* 0\r\n\r\n or data: [DONE] written */
	TW_END_NEXT_REQUEST = 2, /* the next request arrived on the socket */
	TW_END_CLOSE = 3,        /* the server closed the connection */
	TW_END_CLIENT_CLOSED = 4,/* the client closed its side mid-stream */
	TW_END_RESET = 5,        /* the connection was reset */
	TW_END_IDLE = 6,         /* no write for streams.idle_timeout (set by user space) */
	TW_END_NO_RESPONSE = 7,  /* the connection ended before any response */
};

/* Flags of a response record. */
enum tw_response_flag {
	TW_RESP_HTTP = 1 << 0,    /* the write starts with "HTTP/1." */
	TW_RESP_CHUNKED = 1 << 1, /* its head says "chunked": a terminator will end it */
	TW_RESP_INTERIM = 1 << 2, /* a 1xx head (100 Continue, 103 Early Hints) alone */
};

/* Identifies a stream: the socket, the generation of its state (when the
 * probe first saw the connection, so that a socket address reused by a
 * later connection never names an older stream) and the request's number
 * on the connection. */
struct stream_key {
	__u64 sock;
	__u64 gen;
	__u32 seq;
	__u8 kind; /* enum tw_stream_record */
	__u8 reason; /* enum tw_end_reason (END), flags (RESPONSE) */
	__u16 len; /* bytes of data after the record (REQUEST, RESPONSE, BODY) */
};

/* REQUEST, RESPONSE and BODY: bytes of the application's buffers. The
 * record is this header and id.len bytes after it, so a short request
 * takes little room in the ring. */
struct stream_payload {
	struct stream_key id;
	__u64 ts_ns;
	__u32 offset; /* REQUEST: offset of the bytes in the request; a first BODY's: in the write */
	__u32 total;  /* REQUEST: bytes read; RESPONSE, BODY: bytes of the write */
	__u32 pid;    /* the reading or writing process (tgid) */
	__u16 client; /* 1: the stream of a client connection (stream_client.h) */
	__u16 port;   /* the server's port: the socket's own, or its peer's on a client's stream */
	char comm[16];
};

/* PROGRESS, END and CHUNK. */
struct stream_stats {
	struct stream_key id;
	__u64 req_ts;         /* last request byte reached the socket */
	__u64 headers_ts;     /* first response write */
	__u64 first_chunk_ts; /* first body chunk written */
	__u64 last_chunk_ts;  /* CHUNK: this chunk */
	__u64 end_ts;         /* END: when it ended */
	__u64 bytes;          /* body bytes written so far (CHUNK: this chunk) */
	__u64 gap_sum_ns;     /* sum of chunk intervals so far */
	__u64 gap_max_ns;     /* longest chunk interval so far */
	__u32 chunks;         /* body chunks so far */
	__u32 pid;
	__u32 gap_counts[TW_GAP_BUCKETS]; /* chunk intervals since the previous PROGRESS */
	/* http mode: bytes of the first write (status line, headers and maybe
	 * the first body bytes; user space splits them, see stream.Stats). */
	__u32 head_bytes;
	__u32 flags;            /* enum tw_stats_flag */
	struct tw_endpoints ep; /* local: the server */
	__u32 _pad;
};

/* Flags of PROGRESS, END and CHUNK records: how the stream's bytes were
 * read. Neither: plaintext from the socket's own syscalls. */
enum tw_stats_flag {
	TW_STATS_TLS = 1 << 0,        /* TLS, its plaintext read by uprobes on the TLS library */
	TW_STATS_TLS_OPAQUE = 1 << 1, /* TLS without plaintext: timed from record headers */
	TW_STATS_CLIENT = 1 << 2,     /* a client connection: the request written, the response read */
};

/* What user space knows of a process that serves a watched port with TLS
 * (tw_st_tls_procs, keyed by tgid). The kernel adds SEEN when it first
 * sees the process read a ClientHello, and tells user space once. */
enum tw_tls_proc_state {
	TW_TLS_PROC_SEEN = 1,        /* reported to user space, not probed (yet) */
	TW_TLS_PROC_PROBED = 2,      /* uprobes on its TLS library are attached */
	TW_TLS_PROC_UNPROBEABLE = 3, /* no library the probe knows: its TLS stays opaque */
};

/* The TLS libraries a probed process's uprobes cover: they say how a call
 * is keyed between its entry, the socket reads inside it and its return. */
enum tw_tls_lib {
	TW_TLS_LIB_OPENSSL = 1 << 0, /* OpenSSL or BoringSSL API (SSL_read, SSL_write): by thread */
	TW_TLS_LIB_GO = 1 << 1,      /* Go crypto/tls: by goroutine (g, in R14) */
};

struct tw_tls_proc {
	__u8 state; /* enum tw_tls_proc_state */
	__u8 libs;  /* enum tw_tls_lib */
	__u16 _pad;
	__u32 _pad2;
};

enum tw_stream_counter {
	TW_ST_COUNTER_RINGBUF_LOST = 0,
	TW_ST_COUNTER_NEW_SOCKETS,     /* connections that started being tracked */
	TW_ST_COUNTER_TRACK_FAILED,    /* refused: no room for their state */
	TW_ST_COUNTER_CLOSED,          /* tracked connections that closed */
	TW_ST_COUNTER_STALE,           /* state of a socket whose close was not seen, found by its successor */
	TW_ST_COUNTER_TLS,             /* connections that began with a TLS ClientHello */
	TW_ST_COUNTER_TLS_PLAIN,       /* of those, plaintext-driven: a server's in a probed process, a client's once a call of it is read */
	TW_ST_COUNTER_TLS_NO_ROOM,     /* of those, no room in tw_st_socks for uprobes to reach their state: opaque */
	TW_ST_COUNTER_UNREAD,          /* request, response head or body records not sent: the bytes could not be read */
	TW_ST_COUNTER_TAIL_FROM_USER,  /* body writes whose last bytes were read from the writer's memory: not found in the kernel's copy */
	TW_ST_COUNTER_SHED,            /* request and body records not sent: the ring was fuller than payload_room */
	TW_ST_COUNTER_MAX,
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
	TW_XDP_REASON_NONE = 0,  /* passed: nothing wrong with it, not blocklisted */
	TW_XDP_REASON_BLOCKLIST, /* dropped: source in the blocklist, not in the allowlist */
	TW_XDP_REASON_MALFORMED, /* dropped: headers truncated or inconsistent */
	TW_XDP_REASON_ALLOWLIST, /* passed: source in the blocklist, but the allowlist wins */
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

/* Prefix tables (blocklist and allowlist, one per family): a bucketized
 * cuckoo hash in an array map. Element 0 is the head, elements 1..mask+1
 * the buckets. A prefix of length l is stored as its masked address and
 * l + 1 (so an all-zero slot is empty) in one of two buckets, chosen by two
 * multiply-shift hashes (the top bits of the key times an odd multiplier,
 * the seed, which user space picks at random for each table; the top bits
 * because a short prefix's key ends in many zero bits). A bucket's slots fill in order and never empty,
 * and a key is in its second bucket only if its first is full. A lookup
 * probes, for every length present (the head's bitmap, longest first),
 * the first bucket of the masked source, and the second when the first is
 * full. User space builds the whole table off to the side and swaps it
 * in.
 *
 * The length index, elements mask+2 onwards, narrows "every length
 * present" down to the lengths that can hold the source: a slot per key
 * (the source's /16 for IPv4, its /32 for IPv6, folded to the slot count
 * by its low bits) holds the bitmap of the lengths of the prefixes that
 * contain an address with that key. A prefix at least as long as the key
 * sets its length in one slot; a shorter one in every slot of the keys it
 * covers (every slot, when they are as many). A miss, the common case,
 * then probes the few lengths that share its slot, not all of them. The
 * slot bitmaps have the heads' layout; length 0 stays in the head. */
#define TW_XDP_BUCKET_SLOTS 4

/* IPv4 slot: (masked address in host order) << 8 | (length + 1). */
struct tw_xdp_bucket4 {
	__u64 slot[TW_XDP_BUCKET_SLOTS];
};

/* lens: bit i set when length 32 - i is present (bit 0 is /32, so the
 * lowest set bit is the longest length). */
struct tw_xdp_head4 {
	__u64 seed[2];
	__u32 mask;  /* buckets - 1; the bucket count is a power of two */
	__u32 shift; /* 64 - log2(buckets), at most 63: the hash is the product's top bits */
	__u64 lens;
};

/* IPv6 slot i: hi[i] and lo[i] are the masked address's two halves in
 * host order, len[i] the length + 1 (0: empty). */
struct tw_xdp_bucket6 {
	__u64 hi[TW_XDP_BUCKET_SLOTS];
	__u64 lo[TW_XDP_BUCKET_SLOTS];
	__u8 len[TW_XDP_BUCKET_SLOTS];
	__u8 _pad[4];
};

/* lens[0] bit i: length 128 - i; lens[1] bit i: length 64 - i; lens[2]
 * bit 0: length 0. seed[0..1] hash to the first bucket, seed[2..3] to the
 * second. */
struct tw_xdp_head6 {
	__u64 seed[4];
	__u32 mask;
	__u32 shift;
	__u64 lens[3];
	__u64 _pad2;
};

/* Length index elements, bucket-sized. IPv4: slot (source >> 16) &
 * (2 * mask + 1), at most 2^16 slots, eight per element, lens[slot & 7] of
 * element mask + 2 + slot / 8 (lengths 32..1, as in the head). IPv6: slot
 * (source's hi >> 32) & mask, four per element, lens[2 * (slot & 3)] and
 * lens[2 * (slot & 3) + 1] of element mask + 2 + slot / 4 (the head's
 * lens[0] and lens[1]). */
#define TW_XDP_INDEX4_SLOTS 8
#define TW_XDP_INDEX6_SLOTS 4

struct tw_xdp_index4 {
	__u32 lens[TW_XDP_INDEX4_SLOTS];
};

struct tw_xdp_index6 {
	__u64 lens[2 * TW_XDP_INDEX6_SLOTS];
	__u8 _pad[8];
};

#endif
