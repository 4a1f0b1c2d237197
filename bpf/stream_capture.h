/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: request capture. The request's head and the start of its body
 * are copied to user space, in slices, as the application reads them, for
 * the request details the kernel does not parse. Part of stream.bpf.c; the
 * buffers come from syscall_io.h. */
#ifndef TOKENWIRE_STREAM_CAPTURE_H
#define TOKENWIRE_STREAM_CAPTURE_H

/* Request capture budget per request, set by user space
 * (streams.request_capture_bytes): the head and as much of the body. */
const volatile __u32 request_capture_max = 65536;

/* A payload record being built: its header and up to TW_REQ_SLICE bytes.
 * Per CPU, so that the record goes out with bpf_ringbuf_output at its
 * real length (a reservation's size is fixed). */
struct payload_buf {
	struct stream_payload h;
	__u8 data[TW_REQ_SLICE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct payload_buf);
} tw_st_buf SEC(".maps");

/* How many bytes may wait in the ring, set by user space, for a payload
 * record (request and body bytes) to go in: the rest is kept for the
 * records that time and end streams, and for response heads. A flood of requests to
 * capture would otherwise fill the ring, and the END records lost to it
 * would leave their streams open until they expire. CPUs that check at
 * the same moment can each still add a record: the kept room is short of
 * a quarter by at most a slice per CPU. */
const volatile __u64 payload_room = 0xffffffff;

/* payload_output sends a payload record of size bytes at rec, or counts
 * it shed when it would take the ring past payload_room (unless keep: a
 * response's head, which decides whether it is a stream, and a TLS
 * ClientHello, once per connection, which names the server for every
 * call on it), or lost when the ring has no room. */
static __always_inline int payload_output(void *rec, __u64 size, const int keep)
{
	__u64 waiting = bpf_ringbuf_query(&tw_st_events, BPF_RB_AVAIL_DATA);
	__u32 lost = TW_ST_COUNTER_SHED;
	/* A record takes its size and an 8-byte header, rounded up to 8. */
	if (keep || waiting + ((size + 15) & ~7ULL) <= payload_room) {
		if (!bpf_ringbuf_output(&tw_st_events, rec, size, wakeup_flags(waiting)))
			return 0;
		lost = TW_ST_COUNTER_RINGBUF_LOST;
	}
	/* One count for both: a second one's key took stack of its own. */
	count(&tw_st_counters, lost);
	return -1;
}

/* payload_head fills b's header for a record of kind about the stream in
 * st. */
static __always_inline void payload_head(struct payload_buf *b, const struct sock *sk, const struct stream_state *st,
					 __u8 kind, __u8 flags, __u64 total)
{
	b->h.id.sock = (__u64)sk;
	b->h.id.gen = st->gen;
	/* In IDLE the only payload is the head of a response written after a
	 * chunked one ended: it begins the connection's next stream. */
	b->h.id.seq = st->seq + (st->state == TW_ST_IDLE);
	b->h.id.kind = kind;
	b->h.id.reason = flags;
	b->h.id.len = 0;
	b->h.ts_ns = bpf_ktime_get_ns();
	b->h.offset = 0;
	b->h.total = total;
	b->h.pid = bpf_get_current_pid_tgid() >> 32;
	b->h.client = st->client;
	/* The stream's server port before any PROGRESS carries the socket's
	 * addresses: a stream stuck before its first chunk ends by the idle
	 * timeout with this alone. */
	if (st->client) {
		bpf_core_read(&b->h.port, sizeof(b->h.port), &sk->__sk_common.skc_dport);
		b->h.port = bpf_ntohs(b->h.port);
	} else {
		bpf_core_read(&b->h.port, sizeof(b->h.port), &sk->__sk_common.skc_num);
	}
	bpf_get_current_comm(b->h.comm, sizeof(b->h.comm));
}

/* payload_start returns the scratch record with its header filled for a
 * record of kind about the stream in st. */
static __always_inline struct payload_buf *payload_start(const struct sock *sk, const struct stream_state *st,
							 __u8 kind, __u8 flags, __u64 total)
{
	__u32 zero = 0;
	struct payload_buf *b = bpf_map_lookup_elem(&tw_st_buf, &zero);
	if (!b)
		return NULL;
	payload_head(b, sk, st, kind, flags, total);
	return b;
}

/* read_size returns n (1 <= n <= max, max a power of two) as a value
 * whose bound the verifier sees in the value itself: a bound checked
 * earlier may have been checked on another register or before a spill,
 * and the verifiers of 5.10 and 6.1 (6.12's too, for some hook types) lose it
 * there (R2 min value is negative, unbounded memory access). The barrier
 * stops the compiler from proving the mask redundant and dropping it.
 * Use the returned value for every length after it: the read, the
 * record's len, the ring-buffer size. */
static __always_inline __u64 read_size(__u64 n, const __u64 max)
{
	barrier_var(n);
	return ((n - 1) & (max - 1)) + 1;
}

_Static_assert((TW_REQ_SLICE & (TW_REQ_SLICE - 1)) == 0, "read_size needs a power of two");
_Static_assert((TW_PEEK_MAX & (TW_PEEK_MAX - 1)) == 0, "read_size needs a power of two");

/* payload_send reads n bytes (at most TW_REQ_SLICE) from src into the
 * record and sends it. */
static __always_inline int payload_send(struct payload_buf *b, const void *src, __u32 n)
{
	if (n == 0 || n > TW_REQ_SLICE)
		return -1;
	__u64 len = read_size(n, TW_REQ_SLICE);
	if (bpf_probe_read_user(b->data, len, src)) {
		/* A page of the buffer was not mapped just then: being
		 * migrated, or collapsed into a huge page. The helper cannot
		 * fault it in, and the bytes are not read. */
		count(&tw_st_counters, TW_ST_COUNTER_UNREAD);
		return -1;
	}
	b->h.id.len = len;
	return payload_output(b, sizeof(b->h) + len, b->h.id.kind == TW_REC_TLS_HELLO);
}

#define REQ_SLICES 16 /* slices one read may send: 64 KiB */

/* capture_from copies n of the ret bytes the application just read (at
 * buf) to user space, as slices of up to TW_REQ_SLICE bytes, until
 * request_capture_max bytes of the request are sent. User space reads
 * them in order, by offset. */
static __always_inline void capture_from(const struct sock *sk, struct stream_state *st, const char *buf, __u64 n,
					 __u64 ret)
{
	if (st->req_captured >= request_capture_max)
		return;
	if (n > ret)
		n = ret;
	if (n > request_capture_max - st->req_captured)
		n = request_capture_max - st->req_captured;
	struct payload_buf *b = payload_start(sk, st, TW_REC_REQUEST, 0, ret);
	if (!b)
		return;
	/* Whole slices first, at a constant size, then the rest in one slice
	 * of a variable size. A variable size in the loop made the verifier
	 * track off precisely through it, so it walked the loop body once
	 * per slice and path, not once: with 64 KiB to capture, the receive
	 * program outgrew the 1M instructions the verifiers of 5.10 and 6.1
	 * walk, and lost request capture there. request_capture_max is a
	 * constant at load: the verifier walks only the slices it allows. */
	__u32 off = 0;
	for (int i = 0; i < REQ_SLICES - 1; i++) {
		if (n - off <= TW_REQ_SLICE || (i + 1) * TW_REQ_SLICE >= request_capture_max)
			break;
		b->h.offset = st->req_captured + off;
		if (payload_send(b, buf + off, TW_REQ_SLICE))
			goto done;
		off += TW_REQ_SLICE;
	}
	b->h.offset = st->req_captured + off;
	payload_send(b, buf + off, n - off > TW_REQ_SLICE ? TW_REQ_SLICE : n - off);
done:
	st->req_captured += ret;
}

/* capture_request captures what the current read syscall just read. */
static __noinline void capture_request(const struct sock *sk, struct stream_state *st, int ret)
{
	if (st->req_captured >= request_capture_max)
		return;
	struct user_io io;
	if (syscall_io(&io))
		return;
	capture_from(sk, st, io.iov[0].iov_base, io.iov[0].iov_len, ret);
}

#endif /* TOKENWIRE_STREAM_CAPTURE_H */
