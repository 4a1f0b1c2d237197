/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: what the response's bytes say. Its head is copied to user
 * space as it is written, and each later write is checked for the end of
 * the body. Part of stream.bpf.c; the buffers come from syscall_io.h, the
 * payload records from stream_capture.h. */
#ifndef TOKENWIRE_STREAM_PEEK_H
#define TOKENWIRE_STREAM_PEEK_H

#define WRITE_TERMINATOR 1
#define WRITE_PEEKED 2
#define WRITE_DATA 4       /* a terminating write that also carries body data */
#define WRITE_HEAD_SHIFT 4 /* a head write: its head_flags from this bit on */
/* A write that is no part of the response: an interim head, or the
 * previous response's last write reported late (answer_sent). */
#define WRITE_SKIP (TW_RESP_INTERIM << WRITE_HEAD_SHIFT)

/* Bytes of a response's first write (its head, and body bytes written
 * with it) its record carries; "chunked" is looked for in the first
 * TW_PEEK_MAX of them (head_flags). Here, not in tokenwire.h, which the
 * bench's record producer compiles too. */
#define TW_HEAD_MAX 2048

/* Whether body writes (a stream's first and the ends of its last events)
 * go to user space for its GenAI details (streams.response_details). */
const volatile __u8 response_details = 1;

static __always_inline int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* is_done_event matches "data: [DONE]" written on its own, the end of an
 * OpenAI-style SSE stream: bare, or framed as one chunk of a chunked body
 * ("e\r\ndata: [DONE]\n\n\r\n", as Go's net/http and uvicorn send it).
 * b holds the write's last len bytes: all of it, or all but its first cut
 * (up to 6: the chunk-size line or its digits, in buffers of their own as
 * Node's http module writes them, so b starts at the line's CRLF or after
 * it). */
static __always_inline int is_done_event(const char b[32], __u64 len, __u64 cut)
{
	if (len < 12 || len > 32 || cut > 6)
		return 0;
	__u32 off = 0;
	/* An optional chunk-size line: up to 4 hex digits and CRLF. */
	if (cut) {
		if (b[0] == '\r' && b[1] == '\n')
			off = 2;
	} else if (is_hex(b[0])) {
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

_Static_assert(sizeof(((struct payload_buf *)0)->data) > TW_PEEK_MAX, "has_chunked loads data[TW_PEEK_MAX]");

/* has_chunked tells whether "chunked", in any case, is in d[0, n), d
 * being a payload_buf's data (n <= TW_PEEK_MAX): each offset's load takes
 * the byte after the 7 it tests too, masked off, up to d[TW_PEEK_MAX].
 * One 8-byte load per offset, its 7 bytes in lower case (ORing 0x20 turns
 * no other byte into a letter) and one compare: the loop has one branch
 * per step besides its bounds. A compare per byte would be a branch per
 * byte, and the verifier walks each as a path of its own, once per step
 * and per path into the loop: most of the write program's verification. */
static __always_inline int has_chunked(const __u8 *d, __u32 n)
{
	const __u64 word = 0x64656b6e756863ULL; /* "chunked", little-endian */
	for (__u32 i = 0; i < TW_PEEK_MAX - 6; i++) {
		if (i + 7 > n)
			return 0;
		if (((*(const __u64 *)(d + i) | 0x20202020202020ULL) & 0xffffffffffffffULL) == word)
			return 1;
	}
	return 0;
}

/* head_flags reads a response's first write (n bytes at d, a payload_buf's
 * data, as has_chunked needs, n <= TW_PEEK_MAX): HTTP/1.x or not,
 * "chunked" anywhere in it (its body ends with a terminator), and whether
 * its status is 1xx (100 Continue, 103 Early Hints: an interim head, which
 * servers write on its own; the final head follows). Once per response.
 * The kernel needs "chunked" only for a head write that ends its own
 * response and for a request pipelined behind a response; user space
 * reads the whole head for itself. So the scan, a loop step per byte,
 * stops at TW_PEEK_MAX even where the record carries more of the head. */
static __always_inline __u8 head_flags(const __u8 *d, __u32 n)
{
	if (n < 12 || d[0] != 'H' || d[1] != 'T' || d[2] != 'T' || d[3] != 'P' || d[4] != '/' || d[5] != '1' ||
	    d[6] != '.')
		return 0;
	if (d[9] == '1')
		return TW_RESP_HTTP | TW_RESP_INTERIM;
	return has_chunked(d, n) ? TW_RESP_HTTP | TW_RESP_CHUNKED : TW_RESP_HTTP;
}

/* gather_head appends to a response's first write's bytes in d (n of
 * them, its first buffer's) those of its next buffers (io), up to
 * TW_HEAD_MAX and the write's total bytes, and returns how many d holds.
 * Node's http module writes the head and the first event's size line in
 * one buffer, the CRLF and the event in the next two: the event (the
 * response's model and id) goes out with the head, as it does from
 * servers that write both from one buffer. Only with response_details:
 * else no buffer but the head's leaves the kernel. */
static __always_inline __u64 gather_head(__u8 *d, __u64 n, const struct user_io *io, __u64 total)
{
	for (int i = 1; i < MAX_IOV; i++) {
		if (i >= io->nr || n >= TW_HEAD_MAX || n >= total)
			break;
		__u64 take = io->iov[i].iov_len;
		if (take > TW_HEAD_MAX - n)
			take = TW_HEAD_MAX - n;
		if (take > total - n)
			take = total - n;
		if (take == 0)
			continue;
		take = read_size(take, TW_HEAD_MAX);
		/* The compiler drops a mask it can prove (n < TW_HEAD_MAX here),
		 * and the verifiers before 6.12 lose that bound on the way:
		 * keep the mask, which bounds the offset in the register read. */
		__u64 at = n;
		barrier_var(at);
		if (bpf_probe_read_user(d + (at & (TW_HEAD_MAX - 1)), take, io->iov[i].iov_base))
			break;
		n += take;
	}
	return read_size(n, TW_HEAD_MAX);
}

_Static_assert(sizeof(((struct payload_buf *)0)->data) >= 2 * TW_HEAD_MAX,
	       "gather_head reads up to TW_HEAD_MAX bytes at offsets below TW_HEAD_MAX");
_Static_assert((TW_HEAD_MAX & (TW_HEAD_MAX - 1)) == 0 && TW_HEAD_MAX >= TW_PEEK_MAX,
	       "read_size needs a power of two; head_flags reads the first TW_PEEK_MAX");

/* peek_response sends the start of the response's first write (up to
 * TW_HEAD_MAX bytes: hosted APIs and the gateways that relay them send
 * heads of a kilobyte and more, often with the first event) to user
 * space, which finds where its headers end and reads the body bytes
 * after them, and returns its head_flags, read from the first buffer
 * (len bytes at base; total bytes in the write; io: all its buffers, or
 * NULL for one). An interim head is not sent: the stream's head is the
 * final one. */
static __always_inline __u8 peek_response(const struct sock *sk, struct stream_state *st,
					  const void *base, __u64 len, __u64 total, const struct user_io *io)
{
	struct payload_buf *b = payload_start(sk, st, TW_REC_RESPONSE, 0, total);
	if (!b)
		return 0;
	if (len == 0)
		return 0;
	__u64 n = read_size(len > TW_HEAD_MAX ? TW_HEAD_MAX : len, TW_HEAD_MAX);
	if (bpf_probe_read_user(b->data, n, base)) {
		count(&tw_st_counters, TW_ST_COUNTER_UNREAD); /* as in payload_send */
		return 0;
	}
	/* The record's length waits in memory: a register would hold it
	 * through head_flags, with a bound of its own on every way through
	 * gather_head, and the verifier would walk head_flags for each. */
	b->h.id.len = io && io->nr > 1 && response_details ? gather_head(b->data, n, io, total) : n;
	__u8 flags = head_flags(b->data, n > TW_PEEK_MAX ? TW_PEEK_MAX : n);
	if (flags & TW_RESP_INTERIM)
		return flags;
	/* After a chunked response's end only a head starts a response: a
	 * write that is not one is the end's own tail (Go's net/http writes
	 * the last chunk, "0\r\n\r\n", on its own after a flushed body). */
	if (st->state == TW_ST_IDLE && !(flags & TW_RESP_HTTP))
		return flags;
	b->h.id.reason = flags;
	n = read_size(*(volatile __u16 *)&b->h.id.len, TW_HEAD_MAX);
	/* Kept under a flood, as the ClientHello is: the head decides whether
	 * the response is a stream at all, and its mode. Past the room for
	 * payloads, only its first TW_PEEK_MAX bytes: the rest of the ring is
	 * for the records that time and end streams. */
	if (n > TW_PEEK_MAX &&
	    bpf_ringbuf_query(&tw_st_events, BPF_RB_AVAIL_DATA) + ((sizeof(b->h) + n + 15) & ~7ULL) > payload_room) {
		n = TW_PEEK_MAX;
		b->h.id.len = n;
	}
	payload_output(b, sizeof(b->h) + n, 1);
	return flags;
}

/* send_body sends up to TW_PEEK_MAX bytes of a body write of total
 * bytes: from the start of len bytes at start, at offset at in the write
 * (first), or from their end, which is the write's (tail). */
static __always_inline void send_body(const struct sock *sk, const struct stream_state *st, __u8 flag,
				      const char *start, __u64 len, __u64 total, __u64 at, int tail)
{
	if (!response_details)
		return;
	__u32 n = len > TW_PEEK_MAX ? TW_PEEK_MAX : len;
	struct payload_buf *b = payload_start(sk, st, TW_REC_BODY, flag, total);
	if (!b)
		return;
	b->h.offset = tail ? total - n : at;
	payload_send(b, tail ? start + len - n : start, n);
}

/* send_first sends the start of a response's first body write of ret
 * bytes from its buffers (io): the first buffer, unless it holds 8 bytes
 * or fewer (a chunk-size line) and more follow, then the next that holds
 * more than a CRLF. Node's http module writes an event as size line,
 * CRLF, event, CRLF; hyper as size line with its CRLF, event, CRLF. A
 * walk of the buffers would cost the write program's verification dear:
 * this is a few branches. */
static __always_inline void send_first(const struct sock *sk, const struct stream_state *st,
				       const struct user_io *io, __u64 ret)
{
	const char *base = io->iov[0].iov_base;
	__u64 len = io->iov[0].iov_len, skip = 0; /* bytes of the buffers passed over */
	if (len <= 8 && io->nr >= 2) {
		skip = len;
		base = io->iov[1].iov_base;
		len = io->iov[1].iov_len;
		if (len <= 2 && io->nr >= 3) {
			skip += len;
			base = io->iov[2].iov_base;
			len = io->iov[2].iov_len;
		}
	}
	if (skip >= ret)
		return;
	send_body(sk, st, TW_BODY_FIRST, base, len < ret - skip ? len : ret - skip, ret, skip, 0);
}

/* Scratch room for the end of a write (sent_flags): a stack buffer
 * cannot take a copy at a variable offset on every kernel, and the
 * stack is tight. Copies go at offsets up to 31, of up to 32 bytes.
 * owner is the task using it: fentry and uprobe programs run with
 * preemption on where the kernel is preemptible, and another task's
 * program can take the room meanwhile. */
struct write_end {
	char b[64];
	__u64 owner;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct write_end);
} tw_st_scratch SEC(".maps");

/* gather_short copies a write of ret <= 32 bytes, spread over its
 * buffers, into tmp, 64 bytes of room (an SSE event with its chunk
 * framing in separate buffers, as Node's http module writes them). */
static __always_inline int gather_short(const struct user_io *io, __u64 ret, char *tmp)
{
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
	return 0;
}

/* last_iov finds the buffer of io that holds the last byte of a write of
 * ret bytes: it returns the buffer's base (NULL when the buffers hold fewer
 * than ret bytes) and sets *used to how much of it went, *prev and
 * *prev_len to the buffer before it (NULL and 0 when there is none). */
static __always_inline const char *last_iov(const struct user_io *io, __u64 ret, __u64 *used,
					    const char **prev, __u64 *prev_len)
{
	__u64 left = ret;
	*used = 0;
	*prev = NULL;
	*prev_len = 0;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= io->nr)
			break;
		__u64 len = io->iov[i].iov_len;
		if (left <= len) {
			*used = left;
			return io->iov[i].iov_base;
		}
		*prev = io->iov[i].iov_base;
		*prev_len = len;
		left -= len;
	}
	return NULL;
}

/* last_long_iov finds the last buffer of io that holds 16 bytes or more,
 * all of them among the first upto bytes io holds: a write's last event,
 * past the chunk framing's buffers and a [DONE] event's 14 bytes. It
 * returns the buffer's base (NULL when there is none) and sets *len to
 * its length. */
static __always_inline const char *last_long_iov(const struct user_io *io, __u64 upto, __u64 *len)
{
	const char *found = NULL;
	__u64 off = 0;
	*len = 0;
	for (int i = 0; i < MAX_IOV; i++) {
		if (i >= io->nr)
			break;
		__u64 n = io->iov[i].iov_len;
		if (n > upto - off)
			break;
		if (n >= 16) {
			found = io->iov[i].iov_base;
			*len = n;
		}
		off += n;
	}
	return found;
}

/* end_flags classifies a finished write of ret bytes by its last bytes,
 * read from the syscall's buffers (io, holding all but the first cut of
 * them: io_window): the chunked terminator (alone, or after the last
 * chunk's CRLF), a terminating chunk with trailers, or an SSE "[DONE]"
 * event written on its own (the whole write is short then). b: room for
 * 64 bytes. */
static __always_inline __u8 end_flags(const struct user_io *io, __u64 ret, __u64 cut, char *b)
{
	/* The buffer holding the write's last byte, and how much of it went. */
	const char *base, *prev;
	__u64 used, prev_len, left = ret - cut;
	base = last_iov(io, left, &used, &prev, &prev_len);
	if (!base || used == 0)
		return WRITE_PEEKED;
	/* b[0, n) is the end of the write: all that io holds of it when
	 * short. */
	__u32 n;
	int whole = ret <= 32;
	if (whole && used < left) {
		if (gather_short(io, left, b))
			return WRITE_PEEKED;
		n = left;
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
		if (ret <= 7 || (whole && is_done_event(b, n, cut)))
			return WRITE_PEEKED | WRITE_TERMINATOR;
		return WRITE_PEEKED | WRITE_TERMINATOR | WRITE_DATA;
	}
	if (!whole)
		return WRITE_PEEKED;
	if (!cut && crlf_crlf_end && b[0] == '0' && b[1] == '\r' && b[2] == '\n')
		return WRITE_PEEKED | WRITE_TERMINATOR; /* "0\r\n" trailers "\r\n" */
	if (is_done_event(b, n, cut))
		return WRITE_PEEKED | WRITE_TERMINATOR;
	return WRITE_PEEKED;
}

/* sent_flags is end_flags with the write's end in tw_st_scratch, not on
 * the stack: the programs' call chains come near the verifier's 512
 * bytes. */
static __always_inline __u8 sent_flags(const struct user_io *io, __u64 ret, __u64 cut)
{
	__u32 zero = 0;
	struct write_end *s = bpf_map_lookup_elem(&tw_st_scratch, &zero);
	if (!s)
		return WRITE_PEEKED;
	__u64 me = bpf_get_current_pid_tgid();
	s->owner = me;
	__builtin_memset(s->b, 0, 32);
	__u8 flags = end_flags(io, ret, cut, s->b);
	/* Another task's program took the room meanwhile: the bytes read may
	 * be its write's. */
	return s->owner == me ? flags : WRITE_PEEKED;
}

/* ends_stream_event tells, from the last bytes of a write (t, 16 of
 * them, up to and including t[e]), whether the event they end may end a
 * stream: the usage or the finish reason of OpenAI-style chunks,
 * Anthropic's message_delta, a Responses API response.completed, TGI's
 * details, llama.cpp's timings, Ollama's final object. Cheap to tell, and
 * rare: the bytes of such a write are sent to user space, which parses
 * them. After stripping the framing (CR, LF), it is "}}" after anything
 * but a quote (a closing object, not a string: Anthropic's text deltas
 * end '"}}'), '"}]}' (a finish reason, where token chunks end 'null}]}'),
 * or three digits and "}" (Ollama's eval_duration, where its other lines
 * end 'false}'); or "[DONE]" (its callers look at writes of more than 32
 * bytes: such a one holds an event before it too, a usage chunk gathered
 * with it). e: 15, or 8 for the chunk before a chunked terminator
 * (ends_chunked). */
static __always_inline int ends_stream_event(const char t[16], int e)
{
	for (int i = 0; i < 5; i++) { /* "\n\n\r\n" at most, and a spare */
		if (t[e & 15] != '\r' && t[e & 15] != '\n')
			break;
		e--;
	}
	if (e < 4)
		return 0;
	char c1 = t[(e - 1) & 15], c2 = t[(e - 2) & 15], c3 = t[(e - 3) & 15];
	if (t[e & 15] == ']')
		return c1 == 'E' && c2 == 'N' && c3 == 'O';
	if (t[e & 15] != '}')
		return 0;
	if (c1 == '}' && c2 != '"')
		return 1;
	if (c1 == ']' && c2 == '}' && c3 == '"')
		return 1;
	return c1 >= '0' && c1 <= '9' && c2 >= '0' && c2 <= '9' && c3 >= '0' && c3 <= '9';
}

/* ends_chunked: 16 bytes that end with a chunked terminator after the
 * last chunk's CRLF: the chunk's data ends at t[8]. */
static __always_inline int ends_chunked(const char t[16])
{
	return t[9] == '\r' && t[10] == '\n' && t[11] == '0' && t[12] == '\r' && t[13] == '\n' && t[14] == '\r' &&
	       t[15] == '\n';
}

/* tail_flags reads the last 16 bytes before end (of a buffer holding at
 * least 16 of the write's bytes, at most used of them): a chunked
 * terminator after the last chunk's CRLF ends the response (and the write
 * carried data); an event that may end the stream, the write's last or
 * the one its terminator follows (a server that wrote its last event and
 * ended the response in one write), sends the write's end to user space. */
static __always_inline __u8 tail_flags(const struct sock *sk, const struct stream_state *st, const char *end,
				       __u64 used, __u64 total)
{
	char t[16];
	if (bpf_probe_read_user(t, sizeof(t), end - 16))
		return WRITE_PEEKED;
	int ends = ends_chunked(t);
	if (response_details && (ends ? ends_stream_event(t, 8) : ends_stream_event(t, 15)))
		send_body(sk, st, TW_BODY_TAIL, end - used, used, total, 0, 1);
	return ends ? WRITE_PEEKED | WRITE_TERMINATOR | WRITE_DATA : WRITE_PEEKED;
}

/* short_flags classifies a body write of ret <= 32 bytes, read whole, or
 * but for its first buffers when it has more than MAX_IOV (a: its
 * syscall's arguments, it: its iterator or NULL, as io_window takes
 * them). The first body write's start goes out before io_window replaces
 * io's buffers. */
static __always_inline __u8 short_flags(const struct sock *sk, const struct stream_state *st,
					struct user_io *io, __u64 ret, const struct syscall_args *a,
					const struct iov_iter *it)
{
	if (st->chunks == 0)
		send_first(sk, st, io, ret);
	long cut = io_window(io, ret, a, it);
	if (cut < 0)
		return WRITE_PEEKED;
	return sent_flags(io, ret, cut);
}

/* gathered_flags classifies a body write of ret > 32 bytes from its
 * buffers: the ones holding its last byte, and the one before (a, it: as
 * short_flags takes them). The first body write's start goes out before
 * io_window replaces io's buffers. */
static __always_inline __u8 gathered_flags(const struct sock *sk, const struct stream_state *st,
					   struct user_io *io, __u64 ret, const struct syscall_args *a,
					   const struct iov_iter *it)
{
	if (st->chunks == 0)
		send_first(sk, st, io, ret);
	long cut = io_window(io, ret, a, it);
	if (cut < 0)
		return WRITE_PEEKED;
	const char *base, *prev;
	__u64 used, prev_len;
	base = last_iov(io, ret - cut, &used, &prev, &prev_len);
	if (!base)
		return WRITE_PEEKED;
	if (used == 5) { /* the terminator in a buffer of its own, after the last chunk */
		char t[5];
		if (bpf_probe_read_user(t, sizeof(t), base) || t[0] != '0' || t[1] != '\r' || t[2] != '\n' ||
		    t[3] != '\r' || t[4] != '\n')
			return WRITE_PEEKED;
		/* The last event before it: Node's http module gathers an
		 * event written in the tick that ends the response with the
		 * terminator (an event two back, such as a usage chunk before
		 * [DONE], is past the window's four buffers). */
		if (response_details) {
			base = last_long_iov(io, ret - cut - 5, &used);
			if (base)
				tail_flags(sk, st, base + used, used, ret);
		}
		return WRITE_PEEKED | WRITE_TERMINATOR | WRITE_DATA;
	}
	if (used >= 16)
		return tail_flags(sk, st, base + used, used, ret);
	if (used <= 2 && prev && prev_len >= 16) /* a chunk's data, then its CRLF */
		return tail_flags(sk, st, prev + prev_len, prev_len, ret);
	return WRITE_PEEKED;
}

/* body_flags_user classifies a body write of ret bytes from the
 * writer's memory (body_flags): a short one read whole, a longer one by
 * the last 16 bytes of the buffer the syscall names, or of the last buffer
 * of a gathered write that holds data (found through the write's iterator
 * it where the hook has it: io_window). The first body write's start is
 * sent to user space. */
static __noinline __u8 body_flags_user(const struct sock *sk, const struct stream_state *st, __u64 ret,
				       const struct iov_iter *it)
{
	struct syscall_args a;
	if (syscall_args(&a))
		return 0;
	if (ret > 32 && (a.nr == NR_WRITE || a.nr == NR_SENDTO)) {
		if (st->chunks == 0)
			send_body(sk, st, TW_BODY_FIRST, (const char *)a.arg1, ret, ret, 0, 0);
		return tail_flags(sk, st, (const char *)a.arg1 + ret, ret, ret);
	}
	struct user_io io;
	if (syscall_io_of(&a, &io))
		return 0;
	if (ret <= 32)
		return short_flags(sk, st, &io, ret, &a, it);
	return gathered_flags(sk, st, &io, ret, &a, it);
}

/* send_copied_tail sends the end of a body write of ret bytes from the
 * kernel's copy of it (tail: the address of its last FRAG_TAIL bytes, in
 * a page that holds at least its last TW_PEEK_MAX), as tail_flags sends
 * it from the writer's memory: its last TW_PEEK_MAX bytes. */
static __always_inline void send_copied_tail(const struct sock *sk, const struct stream_state *st, __u64 tail,
					     __u64 ret)
{
	struct payload_buf *b = payload_start(sk, st, TW_REC_BODY, TW_BODY_TAIL, ret);
	if (!b)
		return;
	__u64 n = read_size(ret > TW_PEEK_MAX ? TW_PEEK_MAX : ret, TW_PEEK_MAX);
	b->h.offset = ret - n;
	if (bpf_probe_read_kernel(b->data, n, (const void *)(tail + FRAG_TAIL - n))) {
		count(&tw_st_counters, TW_ST_COUNTER_UNREAD);
		return;
	}
	b->h.id.len = n;
	payload_output(b, sizeof(b->h) + n, 0);
}

/* body_flags classifies a body write of ret bytes at the least cost. A
 * short write (where terminators and [DONE] events are: up to 32 bytes)
 * is read whole. Of a longer one only the last 16 bytes are read: from
 * the kernel's copy where sent_tail found them (tail), which also gives
 * the write's end to user space when it holds an event that may end the
 * stream (send_copied_tail); otherwise straight from the buffer the syscall names
 * (write, sendto: no other read), or from the last buffer of a gathered
 * write that holds data (not just the CRLF after a chunk's data). The
 * first body write's start goes to user space too (the first event: the
 * response's model and id). sent: a write of the socket's owner, seen
 * by a BTF-typed hook (sk a BTF pointer); else a client's read, or a
 * write seen by another hook type. it: the write's iterator after the
 * call, where the hook has it (fexit, kretprobe; else NULL): a gathered
 * write's end is found through it (io_window). */
static __always_inline __u8 body_flags(const struct sock *sk, const struct stream_state *st, __u64 ret,
				       const int sent, const struct iov_iter *it)
{
	if (ret > 32 && sent && frag_va_base && st->chunks) {
		__u64 room = 0;
		__u64 tail = sent_tail(sk, &room);
		if (tail) {
			char t[FRAG_TAIL];
			read_tail(t, tail);
			int ends = ends_chunked(t);
			__u8 flags = ends ? WRITE_PEEKED | WRITE_TERMINATOR | WRITE_DATA : WRITE_PEEKED;
			if (!response_details || !ends_stream_event(t, ends ? 8 : 15))
				return flags;
			/* An event that may end the stream, the write's last or
			 * the one its terminator follows: the write's end goes
			 * to user space, from the same copy; from the writer's
			 * memory when the write began on the fragment's previous
			 * page and this one holds less of it than a record takes
			 * (one write in 32 KiB that a thread writes), one call
			 * of body_flags_user for both ways. */
			if (room >= ret || room >= TW_PEEK_MAX) {
				send_copied_tail(sk, st, tail, ret);
				return flags;
			}
		}
		count(&tw_st_counters, TW_ST_COUNTER_TAIL_FROM_USER);
	}
	return body_flags_user(sk, st, ret, it);
}

/* head_ends says whether a chunked response ends in the write of its
 * head (head, its head_flags) of n bytes at buf, from its last 16 bytes:
 * Go's net/http writes a body that outgrew its 2 KiB buffer unflushed
 * with the head and the terminator, in one write when they fit its 4 KiB.
 * It returns the flags to add. */
static __always_inline __u8 head_ends(__u8 head, const char *buf, __u64 n)
{
	char t[16];
	if ((head & (TW_RESP_CHUNKED | TW_RESP_INTERIM)) != TW_RESP_CHUNKED || n < 16 ||
	    bpf_probe_read_user(t, sizeof(t), buf + n - 16) || !ends_chunked(t))
		return 0;
	return WRITE_TERMINATOR | WRITE_DATA;
}

/* head_sent classifies a write made while no response is under way (or
 * a client's read; peek_sent) by its head, read from the syscall's first
 * buffer: a response's head is sent to user space, an interim head or a
 * write that is no head is not; a chunked response that the buffer
 * carried whole ends there (head_ends). The buffers of a gathered write
 * after its first go out with the head (gather_head), but its end is not
 * looked for, which keeps this, checked once per caller's state, cheap to
 * verify. */
static __noinline __u8 head_sent(const struct sock *sk, struct stream_state *st, int ret)
{
	struct user_io io;
	if (syscall_io(&io))
		return 0;
	__u64 len = io.iov[0].iov_len < (__u64)ret ? io.iov[0].iov_len : (__u64)ret;
	__u8 head = peek_response(sk, st, io.iov[0].iov_base, len, ret, &io);
	__u8 flags = WRITE_PEEKED | (head << WRITE_HEAD_SHIFT);
	if (len == (__u64)ret)
		flags |= head_ends(head, io.iov[0].iov_base, len);
	return flags;
}

/* peek_plain is peek_sent for a write of n bytes of plaintext at buf
 * that a TLS library was handed (stream_tls.h): one buffer, like write(). */
static __always_inline __u8 peek_plain(const struct sock *sk, struct stream_state *st, const char *buf, __u64 n)
{
	if (st->state != TW_ST_RESPONSE) {
		__u8 head = peek_response(sk, st, buf, n, n, NULL);
		return WRITE_PEEKED | (head << WRITE_HEAD_SHIFT) | head_ends(head, buf, n);
	}
	if (n <= 32) {
		struct user_io io = {.nr = 1};
		io.iov[0].iov_base = (void *)buf;
		io.iov[0].iov_len = n;
		return short_flags(sk, st, &io, n, NULL, NULL);
	}
	if (st->chunks == 0)
		send_body(sk, st, TW_BODY_FIRST, buf, n, n, 0, 0);
	return tail_flags(sk, st, buf + n, n, n);
}

#endif
