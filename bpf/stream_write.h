/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: what a response write does to the socket's stream, once its
 * bytes are classified (stream_peek.h). The socket hooks account the
 * writes of plaintext connections here, the TLS library's uprobes the
 * writes of TLS plaintext (stream_tls.h). Part of stream.bpf.c. */
#ifndef TOKENWIRE_STREAM_WRITE_H
#define TOKENWIRE_STREAM_WRITE_H

/* response_begins handles a write on a connection whose response has
 * not begun (IDLE, REQUEST): the response's head, or its first write when
 * its bytes are unknown. It returns whether the write is a chunk. Out of
 * line: once per response, and kept out of the way of the chunks' path. */
static __noinline int response_begins(const struct sock *sk, struct stream_state *st, __u8 flags, __u64 ret,
					__u64 now)
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
	if (st->pending_req_ts && !(head & TW_RESP_CHUNKED)) {
		/* The next request came before this write was reported: a
		 * client that waits for its response had it whole, from this
		 * write. (A chunked one ends at its terminator, in this write
		 * or a later one.) */
		end_stream(sk, st, TW_END_NEXT_REQUEST, now);
		begin_pending(st, now, BPF_CORE_READ((const struct tcp_sock *)sk, write_seq));
	}
	return 0;
}

/* account_write accounts a write of ret bytes that peek_sent or
 * peek_plain classified as flags (0: bytes unknown, an opaque write).
 * chunk is inlined once, on the path of a response's body. */
static __always_inline void account_write(const struct sock *sk, struct stream_state *st, __u8 flags, __u64 ret,
					  __u64 now)
{
	if (flags & WRITE_SKIP)
		return; /* 100 Continue, 103 Early Hints, a late write (head_sent) */
	if (st->state == TW_ST_RESPONSE || response_begins(sk, st, flags, ret, now)) {
		/* A terminator ends the response; the write carried its last
		 * chunk too when it has data before it. */
		if (!(flags & WRITE_TERMINATOR) || (flags & WRITE_DATA))
			chunk(sk, st, ret, now);
		else
			st->bytes += ret;
	} else if (!(flags & WRITE_TERMINATOR) || st->state != TW_ST_RESPONSE) {
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
