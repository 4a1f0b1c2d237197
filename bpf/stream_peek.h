/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: what the bytes say. The request's head is copied to user space
 * as the application reads it, the response's head as it is written, and
 * each later write is checked for the end of the body. Part of
 * stream.bpf.c; the buffers come from syscall_io.h. */
#ifndef TOKENWIRE_STREAM_PEEK_H
#define TOKENWIRE_STREAM_PEEK_H

#define WRITE_TERMINATOR 1
#define WRITE_PEEKED 2

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

static __always_inline int is_terminator(const __u8 b[8])
{
	/* "...\r\n0\r\n\r\n" ends a chunked body; a lone "0\r\n\r\n" too. */
	if (b[3] != '0' || b[4] != '\r' || b[5] != '\n' || b[6] != '\r' || b[7] != '\n')
		return 0;
	return (b[1] == '\r' && b[2] == '\n') || (b[0] == 0 && b[1] == 0 && b[2] == 0);
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

/* peek_response sends the head of the response's first write (len bytes
 * at base, total bytes in the write) to user space, which finds where its
 * headers end. */
static __always_inline void peek_response(const struct sock *sk, struct stream_state *st,
					  const void *base, __u64 len, __u64 total)
{
	struct stream_payload *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		count(&tw_st_counters, TW_ST_COUNTER_RINGBUF_LOST);
		return;
	}
	__u32 n = len > TW_PEEK_MAX ? TW_PEEK_MAX : len;
	if (n == 0 || bpf_probe_read_user(r->data, n, base)) {
		bpf_ringbuf_discard(r, 0);
		return;
	}
	/* Only the status line's prefix is checked here. */
	__u8 flags = 0;
	if (n >= 8 && r->data[0] == 'H' && r->data[1] == 'T' && r->data[2] == 'T' && r->data[3] == 'P' &&
	    r->data[4] == '/' && r->data[5] == '1' && r->data[6] == '.')
		flags = TW_RESP_HTTP;
	st->resp_flags = flags;
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
}

/* sent_flags classifies a finished write of ret bytes from the syscall's
 * buffers with one user read: the write's last 8 bytes, or the whole
 * write when it is short enough to be an SSE "[DONE]" event. */
static __always_inline __u8 sent_flags(const struct user_io *io, __u64 ret)
{
	/* Find the buffer holding the write's last byte. */
	const char *end = NULL;
	__u64 left = ret, seg = 0;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= io->nr)
			break;
		__u64 len = io->iov[i].iov_len;
		if (left <= len) {
			end = (const char *)io->iov[i].iov_base + left;
			seg = left;
			break;
		}
		left -= len;
	}
	if (!end)
		return WRITE_PEEKED;
	int whole = seg == ret && ret <= 32;
	__u32 n;
	if (whole)
		n = ret;
	else if (seg >= 8)
		n = 8;
	else
		return WRITE_PEEKED; /* the terminator is split across iovecs: leave it */
	if (n < 5 || n > 32)
		return WRITE_PEEKED;
	/* The compiler would drop a bound it can prove: hide n from it, then
	 * bound the length in the register the verifier checks. */
	barrier_var(n);
	char b[32] = {};
	if (bpf_probe_read_user(b, ((n - 1) & 31) + 1, end - n))
		return WRITE_PEEKED;
	__u8 t[8] = {};
	if (n >= 8) {
		for (int i = 0; i < 8; i++)
			t[i] = b[(n - 8 + i) & 31];
	} else if (n == 5) {
		for (int i = 0; i < 5; i++)
			t[3 + i] = b[i];
	}
	if (is_terminator(t) || (whole && is_done_event(b, n)))
		return WRITE_PEEKED | WRITE_TERMINATOR;
	return WRITE_PEEKED;
}

/* peek_sent looks at what a finished write carried, from the writer's own
 * syscall arguments: the response head for the first write of a response,
 * terminators for the others. 0: the write's buffers are unknown (a kernel
 * thread, sendfile, io_uring), so the stream is opaque. */
static __always_inline __u8 peek_sent(const struct sock *sk, struct stream_state *st, int ret)
{
	struct user_io io;
	if (syscall_io(&io))
		return 0;
	if (st->state == TW_ST_REQUEST) {
		__u64 len = io.iov[0].iov_len < (__u64)ret ? io.iov[0].iov_len : (__u64)ret;
		peek_response(sk, st, io.iov[0].iov_base, len, ret);
		return WRITE_PEEKED;
	}
	return sent_flags(&io, ret);
}

#endif
