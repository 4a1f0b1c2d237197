/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: what a response write does to the socket's stream: which
 * request's response it is (answer_sent), its bytes classified
 * (stream_peek.h), and how it is accounted. The socket hooks account the
 * writes of plaintext connections here, the TLS library's uprobes the
 * writes of TLS plaintext (stream_tls.h). Part of stream.bpf.c. */
#ifndef TOKENWIRE_STREAM_WRITE_H
#define TOKENWIRE_STREAM_WRITE_H

/* response_begins handles a write on a connection whose response has
 * not begun (IDLE, REQUEST): the response's head, or its first write when
 * its bytes are unknown. It returns whether the write is a chunk. Out of
 * line: once per response, and kept out of the way of the chunks' path. */
static __noinline int response_begins(struct stream_state *st, __u8 flags, __u64 ret, __u64 now)
{
	__u8 head = flags >> WRITE_HEAD_SHIFT;
	if (st->state == TW_ST_IDLE) {
		st->ended_by_terminator = 0;
		if (!(head & TW_RESP_HTTP))
			return 0;
		begin_stream(st, st->req_ts, now); /* it arrived with the previous request */
	}
	st->state = TW_ST_RESPONSE;
	st->resp_flags = head;
	st->headers_ts = now;
	st->pid = bpf_get_current_pid_tgid() >> 32;
	if (!(flags & WRITE_PEEKED) || !(head & TW_RESP_HTTP))
		return 1; /* opaque: every write is a chunk */
	/* http: the head write is not a chunk here; any body bytes it
	 * carried are credited in user space from head_bytes. */
	st->head_bytes = ret;
	return 0;
}

/* no_response_yet notes a server's write that is not the response to the
 * request under way (an interim head such as 100 Continue, or the end of
 * the response before it, reported late): the response is yet to come,
 * and what reached the socket since, such as the body the 100 asked for,
 * is still the request. sent: the socket's write_seq after it. */
static __always_inline void no_response_yet(struct stream_state *st, __u32 sent)
{
	if (st->pending_req_ts) {
		st->req_ts = st->pending_req_ts;
		st->pending_req_ts = 0;
	}
	st->req_seq = sent;
}

/* write_began returns where a write of ret bytes on sk, just reported,
 * began: the socket's write_seq before it. */
static __always_inline __u32 write_began(const struct sock *sk, int ret)
{
	return BPF_CORE_READ((const struct tcp_sock *)sk, write_seq) - (__u32)ret;
}

/* seq_before reports whether sequence number a comes before b, in serial
 * number arithmetic: write_seq wraps. */
static __always_inline int seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

/* answer_sent is head_sent for a server's write of ret bytes, which may
 * have been reported after the client's next request came: a write that
 * began before the request under way came is skipped (WRITE_SKIP), and
 * one that began after a request that came while it waited answers that
 * one. Out of line, and apart from head_sent, which a client's read
 * calls too: the end of a stream here would take that read's chain of
 * frames past the verifier's 512 bytes. head_sent is its last call, with
 * nothing live across it, so that the verifier walks it once for every
 * way here. */
static __noinline __u8 answer_sent(const struct sock *sk, struct stream_state *st, int ret)
{
	if (st->state == TW_ST_REQUEST) {
		__u32 began = write_began(sk, ret);
		/* Its bytes began before the request came (req_seq), and it
		 * was reported after (a write that waited for the client to
		 * read, or whose report the client's next request overtook):
		 * the end of the response that request ended, not this one's
		 * start (account_write notes it). */
		if (seq_before(began, st->req_seq))
			return WRITE_SKIP;
		/* It began after a request that came while this one waited
		 * (pending_req_ts): that one's answer. This request's answer
		 * went unreported (sendfile before Linux 6.5, a return probe
		 * the kernel missed): it ends with none. */
		if (st->pending_req_ts && !seq_before(began, st->pending_seq)) {
			end_stream(sk, st, TW_END_NO_RESPONSE, st->pending_req_ts);
			begin_pending(st, bpf_ktime_get_ns(), began);
		}
	}
	return head_sent(sk, st, ret);
}

/* peek_sent looks at what a finished write carried, from the writer's own
 * syscall arguments: the response head for the first write of a response,
 * terminators for the others. 0: the write's buffers are unknown (a kernel
 * thread, sendfile, io_uring), so the stream is opaque. sent, it: as in
 * body_flags. server: a server's write, not a client's read. */
static __always_inline __u8 peek_sent(const struct sock *sk, struct stream_state *st, int ret, const int sent,
				      const struct iov_iter *it, const int server)
{
	if (st->state == TW_ST_RESPONSE)
		return body_flags(sk, st, ret, sent, it);
	return server ? answer_sent(sk, st, ret) : head_sent(sk, st, ret);
}

/* account_write accounts a write of ret bytes that peek_sent or
 * peek_plain classified as flags (0: bytes unknown, an opaque write).
 * chunk is inlined once, on the path of a response's body. */
static __always_inline void account_write(const struct sock *sk, struct stream_state *st, __u8 flags, __u64 ret,
					  __u64 now)
{
	if (flags & WRITE_SKIP) {
		/* 100 Continue, 103 Early Hints, a late write (answer_sent) */
		if (st->state == TW_ST_REQUEST && !st->client && !st->tls)
			no_response_yet(st, BPF_CORE_READ((const struct tcp_sock *)sk, write_seq));
		return;
	}
	if (st->state == TW_ST_RESPONSE || response_begins(st, flags, ret, now)) {
		/* A terminator ends the response; the write carried its last
		 * chunk too when it has data before it. */
		if (!(flags & WRITE_TERMINATOR) || (flags & WRITE_DATA))
			chunk(sk, st, ret, now);
		else
			st->bytes += ret;
	} else if (!(flags & WRITE_TERMINATOR) || st->state != TW_ST_RESPONSE) {
		/* A head, or in IDLE a write that begins nothing. The next
		 * request came before a head was reported (pending_req_ts,
		 * on_data_ready): a client that waits for its response had it
		 * whole, from this write, unless it is chunked (a later
		 * write's terminator ends it). */
		if (st->pending_req_ts && st->state == TW_ST_RESPONSE && !(st->resp_flags & TW_RESP_CHUNKED)) {
			end_stream(sk, st, TW_END_NEXT_REQUEST, now);
			begin_pending(st, now, BPF_CORE_READ((const struct tcp_sock *)sk, write_seq));
		}
		return;
	}
	/* Here too for a head write that ended its response (head_ends): its
	 * body bytes are credited in user space from head_bytes. */
	if (flags & WRITE_TERMINATOR) {
		end_stream(sk, st, TW_END_TERMINATOR, now);
		if (st->pending_req_ts)
			begin_pending(st, now, BPF_CORE_READ((const struct tcp_sock *)sk, write_seq));
	}
}

#endif
