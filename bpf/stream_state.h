/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: per-socket state, its maps and how it is accounted and sent to
 * user space. Part of stream.bpf.c. */
#ifndef TOKENWIRE_STREAM_STATE_H
#define TOKENWIRE_STREAM_STATE_H

/* Configuration, set before load (.rodata: the verifier prunes by it). */
const volatile __u64 coalesce_ns = 500000;  /* writes closer than this are one chunk */
const volatile __u64 flush_ns = 1000000000; /* PROGRESS at most this often per stream */
const volatile __u8 chunk_records = 0;      /* one CHUNK record per chunk (diagnostics) */
const volatile __u64 gap_bounds_ns[TW_GAP_BUCKETS - 1] = {};

/* Per-socket state. Fields a chunk touches come first, in one 64-byte
 * cache line: on a busy host that line is cold at every write, and each
 * further line is another miss on the write path. */
struct stream_state {
	/* hot: every write */
	__u64 last_chunk_ts;
	__u64 last_write_ts;
	__u64 last_flush_ts;
	__u64 bytes;
	__u64 gap_sum_ns;
	__u64 gap_max_ns;
	__u32 chunks;
	__u8 state;      /* enum tw_stream_state */
	__u8 resp_flags; /* enum tw_response_flag of this response */
	__u8 ended_by_terminator; /* IDLE after a chunked response's end */
	__u8 tls;                 /* TLS_* (stream_tls.h): 0 on a plaintext connection */
	/* The client's FIN came during the response, or before the report
	 * of a write for the request (on_state): the stream ends at this time
	 * at the socket's next write report, which counts if it began before
	 * the FIN, or at its close. 0: none pending. Read on every write. */
	__u64 fin_ts;
	/* per chunk, one bucket */
	__u32 gap_counts[TW_GAP_BUCKETS];
	/* per stream */
	__u64 req_ts;
	__u64 headers_ts;
	__u64 first_chunk_ts;
	__u32 pid;
	__u32 req_captured; /* request bytes read by the application so far */
	__u32 head_bytes;   /* http mode: bytes of the first write */
	/* per connection */
	__u32 portpair;     /* fallback map: tells a reused socket address apart */
	__u64 gen;          /* when the connection was first seen; 0: new state */
	/* A request that came before the response it follows was reported
	 * to end (on_data_ready): the next stream's, once it has. */
	__u64 pending_req_ts;
	/* per TLS connection (stream_tls.h) */
	__u64 rx_ts;    /* when the client's bytes last reached the socket */
	__u32 rx_left;  /* bytes of the peer's current TLS record not read yet */
	__u32 tx_left;  /* bytes of this end's current TLS record not written yet */
	__u8 tls13;     /* the server encrypted records before the client did: TLS 1.3 */
	__u8 cli_23;    /* the client sent an encrypted record */
	__u8 cli_fin;   /* TLS 1.3: the client's Finished went by */
	__u8 fin_skips; /* TLS 1.3: client records taken for its handshake so far */
	__u8 tx_app;    /* a server's: its current record is application data */
	__u8 client;    /* a client connection (stream_client.h) */
	__u8 rx_app;    /* a client's: the server's current record is application data */
	__u8 rx_held;   /* a client's: enum held_record (stream_client.h) */
	__u32 seq;     /* streams begun on this connection */
	__u32 fin_seq; /* the socket's write_seq when fin_ts was set */
	/* The socket's write_seq when the stream's request reached it: a
	 * write whose bytes began before it is the previous response's. */
	__u32 req_seq;
	__u32 pending_seq; /* the socket's write_seq when pending_req_ts was set */
	/* The socket's rcv_nxt: a plaintext server's after the client's
	 * last bytes reached it (on_data_ready). A client's TLS connection
	 * timed from its records: when its request was written; the server
	 * sent the bytes before it before it could have read the request
	 * (session tickets a client reads only after its request): they are
	 * no response. */
	__u32 rx_mark;
	/* A client's TLS 1.3 connection timed from its records: the first
	 * record after its first request, held until the next one tells
	 * whether it was a session ticket: its length, when it was read. */
	__u32 held_len;
	__u64 held_ts;
};
_Static_assert(__builtin_offsetof(struct stream_state, gap_counts) == 64,
	       "the fields every write touches fill one cache line");

/* Server ports to watch. Up to MAX_RO_PORTS sit in .rodata, read on every
 * event with no map lookup and no extra cache miss; a longer list goes to
 * tw_st_ports (index = port, value != 0). */
#define MAX_RO_PORTS 16
const volatile __u16 watch_ports[MAX_RO_PORTS] = {};
const volatile __u8 n_watch_ports = 0;
const volatile __u8 ports_in_map = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} tw_st_ports SEC(".maps");

/* Where the per-socket state lives, set by user space before load. With
 * BTF-typed hooks (fentry/fexit, tp_btf) on Linux 5.11+ it is
 * socket-local storage: no other connection can take its place, and the
 * kernel frees it with the socket. Other hook types cannot use it; they
 * keep the state in tw_st_socks, keyed by the socket's address, which
 * refuses new connections when full rather than evict one in flight. */
const volatile __u8 state_in_sk = 0;

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct stream_state);
} tw_st_sk SEC(".maps");

/* Socket storage costs a helper call and a walk of the socket's storage
 * list on every event. Where the kernel has BPF atomics (5.12+), set by
 * user space with state_in_sk, most connections keep their state in a
 * slot instead, picked by the connection's hash: the slot says whose
 * state it holds (owner), so reaching it is an inlined array index and
 * one compare. A connection looks first in tw_st_front (front_slot_of),
 * then in tw_st_slots (slot_of), and one whose slots others hold keeps
 * its state in socket storage as before. A slot is claimed by an atomic
 * compare-and-swap when the connection is first tracked, zeroed and freed
 * at its close (forget); a connection keeps its state where it has it
 * until then (track).
 *
 * Why two tables: the kernel tries kmalloc for an array map of up to
 * 32 KiB, which puts it in its direct map, and the kernel's own accesses
 * on the write path keep that in the TLB; a larger one (tw_st_slots' 8192
 * slots are 2 MiB), or a small one when no such block is free, is
 * vmalloc'ed in 4 KiB pages, each a TLB miss and page walk of its own when
 * a write reaches it (bench/kcost's tw_pt_0b_small against tw_pt_0b_slot).
 * tw_st_front's FRONT_SLOTS fit under that limit on every kernel (the
 * array's header is a few hundred bytes). Which connections get a front
 * slot is up to their hashes: with a few dozen, most do. */
const volatile __u8 state_slots = 0;
/* tw_st_slots' max_entries less one, a power of two less one. */
const volatile __u32 state_slot_mask = 0;

struct state_slot {
	__u64 owner; /* the socket's address; 0: free */
	struct stream_state st;
};
_Static_assert(sizeof(struct state_slot) == 256, "a slot is four cache lines, shared with no other slot");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by user space */
	__type(key, __u32);
	__type(value, struct state_slot);
} tw_st_slots SEC(".maps");

#define FRONT_SLOTS 64
_Static_assert(FRONT_SLOTS * sizeof(struct state_slot) <= 16384,
	       "tw_st_front stays well under the kernel's 32 KiB kmalloc limit for map areas");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FRONT_SLOTS); /* 1 when the slots are not used */
	__type(key, __u32);
	__type(value, struct state_slot);
} tw_st_front SEC(".maps");

/* front_slot_of and slot_of return sk's slots, picked by the hash the
 * kernel gave the connection's addresses and ports when it entered the
 * established table (skc_hash, in the cache line the port test read): it
 * stays when the socket loses its port on the way to TIME_WAIT. Only with
 * socket storage, so sk is a BTF pointer. */
static __always_inline struct state_slot *front_slot_of(const struct sock *sk)
{
	__u32 i = sk->__sk_common.skc_hash & (FRONT_SLOTS - 1);
	return bpf_map_lookup_elem(&tw_st_front, &i);
}

static __always_inline struct state_slot *slot_of(const struct sock *sk)
{
	__u32 i = sk->__sk_common.skc_hash & state_slot_mask;
	return bpf_map_lookup_elem(&tw_st_slots, &i);
}

/* owned returns the state in slot s when sk holds it. */
static __always_inline struct stream_state *owned(struct state_slot *s, const struct sock *sk)
{
	return s && s->owner == (__u64)sk ? &s->st : NULL;
}

/* max_entries from config (1 when the state is in socket storage). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stream_state);
} tw_st_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} tw_st_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TW_ST_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tw_st_counters SEC(".maps");

static __always_inline int port_watched(__u16 port)
{
	if (ports_in_map) {
		__u32 key = port;
		__u8 *v = bpf_map_lookup_elem(&tw_st_ports, &key);
		return v && *v;
	}
	for (int i = 0; i < MAX_RO_PORTS; i++) {
		if (i >= n_watch_ports)
			return 0;
		if (watch_ports[i] == port)
			return 1;
	}
	return 0;
}

/* watched_sock is the first test of every hook: one field load and the
 * port test turn away the sockets of every other port on the host before
 * the per-socket state is touched. */
static __always_inline int watched_sock(const struct sock *sk, const int typed)
{
	return port_watched(RD(typed, sk, __sk_common.skc_num));
}

/* state_of returns the socket's state, or NULL for a connection that
 * carried no request yet. */
static __always_inline struct stream_state *state_of(const struct sock *sk)
{
	if (state_in_sk) {
		if (state_slots) {
			struct stream_state *st = owned(front_slot_of(sk), sk);
			if (st || (st = owned(slot_of(sk), sk)))
				return st;
		}
		return bpf_sk_storage_get(&tw_st_sk, (struct sock *)sk, 0, 0);
	}
	__u64 key = (__u64)sk;
	return bpf_map_lookup_elem(&tw_st_socks, &key);
}

/* reset_stale clears the state an earlier socket at this address left
 * when it closed without the probe seeing it: it is not this
 * connection's. */
static __always_inline void reset_stale(struct stream_state *st)
{
	count(&tw_st_counters, TW_ST_COUNTER_STALE);
	__builtin_memset(st, 0, sizeof(*st));
}

/* fresh_state marks st, new or cleared, as the state of the connection
 * with portpair from now. */
static __always_inline struct stream_state *fresh_state(struct stream_state *st, __u32 portpair, __u64 now)
{
	st->gen = now;
	st->portpair = portpair;
	count(&tw_st_counters, TW_ST_COUNTER_NEW_SOCKETS);
	return st;
}

/* track_in_map is track for state kept in tw_st_socks (no socket
 * storage). Out of line: the zeroed state it inserts (248 bytes) would
 * otherwise sit in the hook's frame, under every call the hook makes. */
static __noinline struct stream_state *track_in_map(const struct sock *sk, __u32 portpair, __u64 now)
{
	__u64 key = (__u64)sk;
	struct stream_state *st = bpf_map_lookup_elem(&tw_st_socks, &key);
	if (st && st->portpair == portpair)
		return st;
	if (st) {
		reset_stale(st);
	} else {
		struct stream_state fresh = {};
		if (bpf_map_update_elem(&tw_st_socks, &key, &fresh, BPF_NOEXIST) != 0 ||
		    !(st = bpf_map_lookup_elem(&tw_st_socks, &key))) {
			count(&tw_st_counters, TW_ST_COUNTER_TRACK_FAILED);
			return NULL;
		}
	}
	return fresh_state(st, portpair, now);
}

/* current returns st, sk's state found in a slot, unless an earlier
 * socket at sk's address left it (closed without the probe seeing it):
 * then st is cleared and made this connection's. */
static __always_inline struct stream_state *current(struct stream_state *st, __u32 portpair, __u64 now)
{
	if (st->portpair == portpair)
		return st;
	reset_stale(st);
	return fresh_state(st, portpair, now);
}

/* claim returns sk's state in slot s, taking the slot when it is free,
 * or NULL when another connection holds it. */
static __always_inline struct stream_state *claim(struct state_slot *s, const struct sock *sk, __u32 portpair, __u64 now)
{
	if (!s)
		return NULL;
	__u64 owner = __sync_val_compare_and_swap(&s->owner, 0, (__u64)sk);
	struct stream_state *st = &s->st;
	if (owner == 0) {
		/* Zeroed at the close too (forget), but a write of the closed
		 * connection that found its slot just before may have landed
		 * since. */
		__builtin_memset(st, 0, sizeof(*st));
		return fresh_state(st, portpair, now);
	}
	if (owner != (__u64)sk)
		return NULL;
	return current(st, portpair, now); /* tracked by another CPU just now */
}

/* track returns the socket's state, making it when the connection is new
 * to the probe (the one insert per connection), or NULL when there is no
 * room (counted). It runs on every request's bytes: a connection keeps
 * the state where it has it, and only one with none claims a slot, so a
 * slot that frees does not take a live connection's state from socket
 * storage or from its other slot and start it afresh. */
static __always_inline struct stream_state *track(const struct sock *sk, const int typed, __u64 now)
{
	__u32 portpair = RD(typed, sk, __sk_common.skc_portpair);
	if (!state_in_sk)
		return track_in_map(sk, portpair, now);
	struct stream_state *st;
	if (state_slots) {
		if ((st = owned(front_slot_of(sk), sk)) || (st = owned(slot_of(sk), sk)))
			return current(st, portpair, now);
		st = bpf_sk_storage_get(&tw_st_sk, (struct sock *)sk, 0, 0);
		if (st && st->gen)
			return st;
		if ((st = claim(front_slot_of(sk), sk, portpair, now)) || (st = claim(slot_of(sk), sk, portpair, now)))
			return st;
	}
	st = bpf_sk_storage_get(&tw_st_sk, (struct sock *)sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st) {
		count(&tw_st_counters, TW_ST_COUNTER_TRACK_FAILED);
		return NULL;
	}
	if (st->gen)
		return st;
	return fresh_state(st, portpair, now);
}

/* release zeroes and frees slot s when sk holds it, and says whether it
 * did. */
static __always_inline int release(struct state_slot *s, const struct sock *sk)
{
	if (!s || s->owner != (__u64)sk)
		return 0;
	__builtin_memset(&s->st, 0, sizeof(s->st));
	/* Freed after the zeroing (the compiler keeps the order, and x86
	 * keeps stores in order): the next claimer finds it fresh. */
	asm volatile("" ::: "memory");
	*(volatile __u64 *)&s->owner = 0;
	return 1;
}

/* forget drops the state of a closing socket: it frees its slots, or
 * its socket storage, and its entry in tw_st_socks (where a TLS connection's state moves for the
 * uprobes to reach it, stream_tls.h). */
static __always_inline void forget(const struct sock *sk, int in_map)
{
	count(&tw_st_counters, TW_ST_COUNTER_CLOSED);
	int freed = 0;
	if (state_in_sk && state_slots)
		freed = release(front_slot_of(sk), sk) | release(slot_of(sk), sk);
	if (state_in_sk && !freed)
		bpf_sk_storage_delete(&tw_st_sk, (struct sock *)sk);
	if (!state_in_sk || in_map) {
		__u64 key = (__u64)sk;
		bpf_map_delete_elem(&tw_st_socks, &key);
	}
}

/* Flags of stream_state.tls. A TLS connection is read as plaintext
 * (TLS_PLAIN) when its process's TLS library is probed as it begins:
 * uprobes then drive its state machine from the plaintext, and need its
 * state where they can find it (tw_st_socks: socket storage is for
 * BTF-typed hooks only), so with socket storage it moves there and the
 * socket's own copy is a stub marked TLS_MOVED. Otherwise (TLS_SEEN
 * alone) it is timed from its record headers. */
#define TLS_SEEN 1
#define TLS_PLAIN 2
#define TLS_MOVED 4
#define TLS_C 8   /* the process's library is keyed by thread (OpenSSL API) */
#define TLS_GO 16 /* ... by goroutine (Go crypto/tls) */
/* A client's connection readied for plaintext before its process was
 * probed: timed from its record headers until a call of it is read
 * (stream_client.h). Set in the state the uprobes reach. */
#define TLS_WAIT 32

static __always_inline __u32 stats_flags(__u8 tls)
{
	if ((tls & TLS_PLAIN) && !(tls & TLS_WAIT))
		return TW_STATS_TLS;
	return tls ? TW_STATS_TLS_OPAQUE : 0;
}

/* emit_stats sends a PROGRESS or END record (kind) from the state. */
static __noinline void emit_stats(const struct sock *sk, struct stream_state *st, __u8 kind,
				__u8 reason, __u64 now)
{
	struct stream_stats *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		count(&tw_st_counters, TW_ST_COUNTER_RINGBUF_LOST);
		return;
	}
	r->id.sock = (__u64)sk;
	r->id.gen = st->gen;
	r->id.seq = st->seq;
	r->id.kind = kind;
	r->id.reason = reason;
	r->id.len = 0;
	r->req_ts = st->req_ts;
	r->headers_ts = st->headers_ts;
	r->first_chunk_ts = st->first_chunk_ts;
	r->last_chunk_ts = st->last_chunk_ts;
	r->end_ts = kind == TW_REC_END ? now : 0;
	r->bytes = st->bytes;
	r->gap_sum_ns = st->gap_sum_ns;
	r->gap_max_ns = st->gap_max_ns;
	r->chunks = st->chunks;
	r->pid = st->pid;
	r->head_bytes = st->head_bytes;
	r->flags = stats_flags(st->tls) | (st->client ? TW_STATS_CLIENT : 0);
	r->_pad = 0;
	for (int i = 0; i < TW_GAP_BUCKETS; i++) {
		r->gap_counts[i] = st->gap_counts[i];
		st->gap_counts[i] = 0;
	}
	fill_endpoints(&r->ep, sk);
	bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
	st->last_flush_ts = now;
}

/* end_stream ends the connection's stream, if one is under way, for
 * reason at now: its END record (NO_RESPONSE when no response began). */
static __noinline void end_stream(const struct sock *sk, struct stream_state *st, __u8 reason, __u64 now)
{
	if (st->state == TW_ST_IDLE)
		return;
	if (st->state == TW_ST_REQUEST)
		reason = TW_END_NO_RESPONSE;
	emit_stats(sk, st, TW_REC_END, reason, now);
	st->state = TW_ST_IDLE;
	st->fin_ts = 0;
	st->ended_by_terminator = reason == TW_END_TERMINATOR;
}

/* begin_stream starts the next stream on the connection, its request
 * having reached the socket at req_ts. */
static __noinline void begin_stream(struct stream_state *st, __u64 req_ts, __u64 now)
{
	st->state = TW_ST_REQUEST;
	st->seq++;
	st->req_ts = req_ts;
	st->headers_ts = 0;
	st->first_chunk_ts = 0;
	st->last_chunk_ts = 0;
	st->last_write_ts = 0;
	st->last_flush_ts = now;
	st->bytes = 0;
	st->gap_sum_ns = 0;
	st->gap_max_ns = 0;
	st->chunks = 0;
	st->req_captured = 0;
	st->head_bytes = 0;
	st->resp_flags = 0;
	st->ended_by_terminator = 0;
	st->pending_req_ts = 0;
	st->fin_ts = 0;
	for (int i = 0; i < TW_GAP_BUCKETS; i++)
		st->gap_counts[i] = 0;
}

/* begin_pending starts the stream of the request that came while the
 * previous response was under way (pending_req_ts), the bytes before
 * sent (a write_seq) being that response's. */
static __always_inline void begin_pending(struct stream_state *st, __u64 now, __u32 sent)
{
	begin_stream(st, st->pending_req_ts, now);
	st->req_seq = sent;
}

/* gap_bucket returns the index of the first bound >= gap (16: none), by
 * binary search: 4 to 6 comparisons instead of up to 16. Every bound is read
 * at a constant index, so that the receiver writes the bounds into the
 * program at load (probe.InlineReadOnly) and a chunk reads no .rodata. */
static __always_inline __u32 gap_bucket(__u64 gap)
{
	if (gap <= gap_bounds_ns[7]) {
		if (gap <= gap_bounds_ns[3]) {
			if (gap <= gap_bounds_ns[1])
				return gap <= gap_bounds_ns[0] ? 0 : 1;
			return gap <= gap_bounds_ns[2] ? 2 : 3;
		}
		if (gap <= gap_bounds_ns[5])
			return gap <= gap_bounds_ns[4] ? 4 : 5;
		return gap <= gap_bounds_ns[6] ? 6 : 7;
	}
	if (gap <= gap_bounds_ns[11]) {
		if (gap <= gap_bounds_ns[9])
			return gap <= gap_bounds_ns[8] ? 8 : 9;
		return gap <= gap_bounds_ns[10] ? 10 : 11;
	}
	if (gap <= gap_bounds_ns[13])
		return gap <= gap_bounds_ns[12] ? 12 : 13;
	if (gap <= gap_bounds_ns[14])
		return 14;
	return gap <= gap_bounds_ns[15] ? 15 : 16; /* 16: the overflow bucket */
}

/* chunk accounts one body write of n bytes. */
static __always_inline void chunk(const struct sock *sk, struct stream_state *st, __u64 n, __u64 now)
{
	if (st->chunks && now - st->last_write_ts < coalesce_ns) {
		/* Part of the same burst (a chunk written in several writes). */
		st->bytes += n;
		st->last_write_ts = now;
		return;
	}
	if (st->chunks) {
		__u64 gap = now - st->last_chunk_ts;
		__u32 b = gap_bucket(gap);
		if (b < TW_GAP_BUCKETS)
			st->gap_counts[b]++;
		st->gap_sum_ns += gap;
		if (gap > st->gap_max_ns)
			st->gap_max_ns = gap;
	}
	st->chunks++;
	st->bytes += n;
	st->last_chunk_ts = now;
	st->last_write_ts = now;
	if (st->chunks == 1) {
		st->first_chunk_ts = now;
		/* TTFT reaches user space now, not at the end of a long stream. */
		emit_stats(sk, st, TW_REC_PROGRESS, 0, now);
		return;
	}
	if (chunk_records) {
		struct stream_stats *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
		if (r) {
			__builtin_memset(r, 0, sizeof(*r));
			r->id.sock = (__u64)sk;
			r->id.gen = st->gen;
			r->id.seq = st->seq;
			r->id.kind = TW_REC_CHUNK;
			r->last_chunk_ts = now;
			r->bytes = n;
			r->chunks = st->chunks;
			bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
		} else {
			count(&tw_st_counters, TW_ST_COUNTER_RINGBUF_LOST);
		}
	}
	if (now - st->last_flush_ts >= flush_ns)
		emit_stats(sk, st, TW_REC_PROGRESS, 0, now);
}

#endif
