/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: what the bytes say. The request's head is copied to user space
 * as the application reads it, the response's head as it is written, and
 * each later write is checked for the end of the body. Part of
 * stream.bpf.c; the buffers come from syscall_io.h. */
#ifndef TOKENWIRE_STREAM_PEEK_H
#define TOKENWIRE_STREAM_PEEK_H

#define WRITE_TERMINATOR 1
#define WRITE_PEEKED 2
#define WRITE_DATA 4       /* a terminating write that also carries body data */
#define WRITE_HEAD_SHIFT 4 /* a head write: its head_flags from this bit on */

/* capture_request copies the head of the request from the buffer the
 * application just read it into. Only the first 2 * TW_PEEK_MAX bytes of
 * a request are kept; user space reassembles slices by offset. */
static __always_inline void capture_request(const struct sock *sk, struct stream_state *st, int ret)
{
	if (st->req_captured >= 2 * TW_PEEK_MAX)
		return;
	struct user_io io;
	if (syscall_io(&io))
		return;
	const void *buf = io.iov[0].iov_base;
	struct stream_payload *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		count(&tw_st_counters, TW_ST_COUNTER_RINGBUF_LOST);
		return;
	}
	__u64 n = io.iov[0].iov_len < (__u64)ret ? io.iov[0].iov_len : (__u64)ret;
	barrier_var(n); /* keep the bound check next to the read for the verifier */
	if (n > TW_PEEK_MAX)
		n = TW_PEEK_MAX;
	if (n == 0 || bpf_probe_read_user(r->data, n, buf) != 0) {
		bpf_ringbuf_discard(r, 0);
		return;
	}
	r->id.sock = (__u64)sk;
	r->id.gen = st->gen;
	r->id.seq = st->seq;
	r->id.kind = TW_REC_REQUEST;
	r->id.reason = 0;
	r->id.len = n;
	r->ts_ns = bpf_ktime_get_ns();
	r->offset = st->req_captured;
	r->total = ret;
	r->pid = bpf_get_current_pid_tgid() >> 32;
	r->_pad = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
	st->req_captured += ret;
}

static __always_inline int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* is_done_event matches "data: [DONE]" written on its own, the end of an
 * OpenAI-style SSE stream: bare, or framed as one chunk of a chunked body
 * ("e\r\ndata: [DONE]\n\n\r\n", as Go's net/http and uvicorn send it).
 * b holds the whole write, len bytes of it. */
static __always_inline int is_done_event(const char b[32], __u64 len)
{
	if (len < 12 || len > 32)
		return 0;
	__u32 off = 0;
	/* An optional chunk-size line: up to 4 hex digits and CRLF. */
	if (is_hex(b[0])) {
		if (b[1] == '\r' && b[2] == '\n')
			off = 3;
		else if (is_hex(b[1]) && b[2] == '\r' && b[3] == '\n')
			off = 4;
		else if (is_hex(b[1]) && is_hex(b[2]) && b[3] == '\r' && b[4] == '\n')
			off = 5;
		else if (is_hex(b[1]) && is_hex(b[2]) && is_hex(b[3]) && b[4] == '\r' && b[5] == '\n')
			off = 6;
	}
	const char *d = &b[off & 7];
	return d[0] == 'd' && d[1] == 'a' && d[2] == 't' && d[3] == 'a' && d[4] == ':' && d[5] == ' ' &&
	       d[6] == '[' && d[7] == 'D' && d[8] == 'O' && d[9] == 'N' && d[10] == 'E' && d[11] == ']';
}

/* head_flags reads a response's first write (n bytes): HTTP/1.x or not,
 * "chunked" anywhere in it (its body ends with a terminator), and whether
 * its status is 1xx (100 Continue, 103 Early Hints: an interim head, which
 * servers write on its own; the final head follows). Once per response.
 * The loop keeps one flag only: the verifier then sees two states per
 * step, not one per position. */
static __always_inline __u8 head_flags(const __u8 d[TW_PEEK_MAX], __u32 n)
{
	if (n < 12 || d[0] != 'H' || d[1] != 'T' || d[2] != 'T' || d[3] != 'P' || d[4] != '/' || d[5] != '1' ||
	    d[6] != '.')
		return 0;
	if (d[9] == '1')
		return TW_RESP_HTTP | TW_RESP_INTERIM;
	__u8 flags = TW_RESP_HTTP;
	for (__u32 i = 0; i < TW_PEEK_MAX - 7; i++) {
		if (i + 7 > n)
			break;
		if ((d[i] | 0x20) == 'c' && (d[i + 1] | 0x20) == 'h' && (d[i + 2] | 0x20) == 'u' &&
		    (d[i + 3] | 0x20) == 'n' && (d[i + 4] | 0x20) == 'k' && (d[i + 5] | 0x20) == 'e' &&
		    (d[i + 6] | 0x20) == 'd') {
			flags |= TW_RESP_CHUNKED;
			break;
		}
	}
	return flags;
}

/* peek_response sends the head of the response's first write (len bytes
 * at base, total bytes in the write) to user space, which finds where its
 * headers end, and returns its head_flags. An interim head is not sent:
 * the stream's head is the final one. */
static __always_inline __u8 peek_response(const struct sock *sk, struct stream_state *st,
					  const void *base, __u64 len, __u64 total)
{
	struct stream_payload *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		count(&tw_st_counters, TW_ST_COUNTER_RINGBUF_LOST);
		return 0;
	}
	__u32 n = len > TW_PEEK_MAX ? TW_PEEK_MAX : len;
	if (n == 0 || bpf_probe_read_user(r->data, n, base)) {
		bpf_ringbuf_discard(r, 0);
		return 0;
	}
	__u8 flags = head_flags(r->data, n);
	if (flags & TW_RESP_INTERIM) {
		bpf_ringbuf_discard(r, 0);
		return flags;
	}
	r->id.sock = (__u64)sk;
	r->id.gen = st->gen;
	r->id.seq = st->seq;
	r->id.kind = TW_REC_RESPONSE;
	r->id.reason = flags;
	r->id.len = n;
	r->ts_ns = bpf_ktime_get_ns();
	r->offset = 0;
	r->total = total;
	r->pid = bpf_get_current_pid_tgid() >> 32;
	r->_pad = 0;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
	return flags;
}

/* Scratch room for gathering a short write from several buffers: a stack
 * buffer cannot take a copy at a variable offset on every kernel. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[64]);
} tw_st_scratch SEC(".maps");

/* gather_short copies a write of ret <= 32 bytes, spread over its
 * buffers, into b (an SSE event with its chunk framing in separate
 * buffers, as Node's http module writes them). */
static __always_inline int gather_short(const struct user_io *io, __u64 ret, char b[32])
{
	__u32 zero = 0;
	char *tmp = bpf_map_lookup_elem(&tw_st_scratch, &zero);
	if (!tmp)
		return -1;
	__u32 off = 0;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= io->nr || off >= ret)
			break;
		__u64 len = io->iov[i].iov_len;
		if (len > ret - off)
			len = ret - off;
		if (len == 0)
			continue;
		barrier_var(len);
		if (bpf_probe_read_user(tmp + (off & 31), ((len - 1) & 31) + 1, io->iov[i].iov_base))
			return -1;
		off += len;
	}
	__builtin_memcpy(b, tmp, 32);
	return 0;
}

/* sent_flags classifies a finished write of ret bytes by its last bytes,
 * read from the syscall's buffers: the chunked terminator (alone, or after
 * the last chunk's CRLF), a terminating chunk with trailers, or an SSE
 * "[DONE]" event written on its own (the whole write is short then). */
static __always_inline __u8 sent_flags(const struct user_io *io, __u64 ret)
{
	/* The buffer holding the write's last byte, and how much of it went. */
	const char *base = NULL;
	__u64 used = 0, left = ret;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= io->nr)
			break;
		__u64 len = io->iov[i].iov_len;
		if (left <= len) {
			base = io->iov[i].iov_base;
			used = left;
			break;
		}
		left -= len;
	}
	if (!base || used == 0)
		return WRITE_PEEKED;
	/* b[0, n) is the end of the write: all of it when whole. */
	char b[32] = {};
	__u32 n;
	int whole = ret <= 32;
	if (whole && used < ret) {
		if (gather_short(io, ret, b))
			return WRITE_PEEKED;
		n = ret;
	} else {
		n = used < 32 ? used : 32;
		/* The compiler would drop a bound it can prove: hide n from it,
		 * then bound the length in the register the verifier checks. */
		barrier_var(n);
		if (bpf_probe_read_user(b, ((n - 1) & 31) + 1, base + used - n))
			return WRITE_PEEKED;
	}
	if (n < 5)
		return WRITE_PEEKED;
	int crlf_end = b[(n - 2) & 31] == '\r' && b[(n - 1) & 31] == '\n';
	int crlf_crlf_end = crlf_end && b[(n - 4) & 31] == '\r' && b[(n - 3) & 31] == '\n';
	/* "0\r\n\r\n": at the start of the buffer (alone, or a gathered
	 * write's own buffer), or after the last chunk's CRLF. */
	if (crlf_crlf_end && b[(n - 5) & 31] == '0' &&
	    (n == 5 || (n >= 7 && b[(n - 7) & 31] == '\r' && b[(n - 6) & 31] == '\n'))) {
		/* Body data before it is a last chunk, unless it is the [DONE]
		 * event, which ends a stream without being one of its chunks. */
		if (ret <= 7 || (whole && is_done_event(b, n)))
			return WRITE_PEEKED | WRITE_TERMINATOR;
		return WRITE_PEEKED | WRITE_TERMINATOR | WRITE_DATA;
	}
	if (!whole)
		return WRITE_PEEKED;
	if (crlf_crlf_end && b[0] == '0' && b[1] == '\r' && b[2] == '\n')
		return WRITE_PEEKED | WRITE_TERMINATOR; /* "0\r\n" trailers "\r\n" */
	if (is_done_event(b, n))
		return WRITE_PEEKED | WRITE_TERMINATOR;
	return WRITE_PEEKED;
}

/* ends_chunked reads the 8 bytes before end: a chunked terminator after
 * the last chunk's CRLF ends the response, and the write carried data. */
static __always_inline __u8 ends_chunked(const char *end)
{
	char t[8];
	if (bpf_probe_read_user(t, sizeof(t), end - 8))
		return WRITE_PEEKED;
	if (t[1] == '\r' && t[2] == '\n' && t[3] == '0' && t[4] == '\r' && t[5] == '\n' && t[6] == '\r' && t[7] == '\n')
		return WRITE_PEEKED | WRITE_TERMINATOR | WRITE_DATA;
	return WRITE_PEEKED;
}

/* body_flags classifies a body write of ret bytes at the least cost. A
 * short write (where terminators and [DONE] events are: up to 32 bytes)
 * is read whole. Of a longer one only the last 8 bytes are read, for a
 * terminator written after the last chunk: straight from the buffer the
 * syscall names (write, sendto: no other read), or from the last buffer
 * of a gathered write. A token chunk costs one 8-byte read. */
static __always_inline __u8 body_flags(__u64 ret)
{
	struct user_io io;
	if (ret <= 32) {
		if (syscall_io(&io))
			return 0;
		return sent_flags(&io, ret);
	}
	struct syscall_args a;
	if (syscall_args(&a))
		return 0;
	if (a.nr == NR_WRITE || a.nr == NR_SENDTO)
		return ends_chunked((const char *)a.arg1 + ret);
	if (syscall_io_of(&a, &io))
		return 0;
	/* The buffer holding the write's last byte, and how much of it went. */
	const char *base = NULL;
	__u64 used = 0, left = ret;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= io.nr)
			break;
		__u64 len = io.iov[i].iov_len;
		if (left <= len) {
			base = io.iov[i].iov_base;
			used = left;
			break;
		}
		left -= len;
	}
	if (!base)
		return WRITE_PEEKED;
	if (used >= 8)
		return ends_chunked(base + used);
	if (used == 5) { /* the terminator in a buffer of its own, after the last chunk */
		char t[5];
		if (!bpf_probe_read_user(t, sizeof(t), base) && t[0] == '0' && t[1] == '\r' && t[2] == '\n' &&
		    t[3] == '\r' && t[4] == '\n')
			return WRITE_PEEKED | WRITE_TERMINATOR | WRITE_DATA;
	}
	return WRITE_PEEKED;
}

/* peek_sent looks at what a finished write carried, from the writer's own
 * syscall arguments: the response head for the first write of a response,
 * terminators for the others. 0: the write's buffers are unknown (a kernel
 * thread, sendfile, io_uring), so the stream is opaque. */
static __always_inline __u8 peek_sent(const struct sock *sk, struct stream_state *st, int ret)
{
	if (st->state == TW_ST_RESPONSE)
		return body_flags(ret);
	struct user_io io;
	if (syscall_io(&io))
		return 0;
	__u64 len = io.iov[0].iov_len < (__u64)ret ? io.iov[0].iov_len : (__u64)ret;
	return WRITE_PEEKED | (peek_response(sk, st, io.iov[0].iov_base, len, ret) << WRITE_HEAD_SHIFT);
}

#endif
