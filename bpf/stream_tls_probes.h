/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams over TLS: the uprobes on a TLS library's read and write calls,
 * which user space attaches per process (internal/tlsprobe); the model is
 * in stream_tls.h.
 *
 *   OpenSSL API (libssl 1.1 and 3, shared; or linked into the executable:
 *   Node, BoringSSL in Envoy): SSL_read, SSL_read_ex, SSL_write and
 *   SSL_write_ex, at entry and return (uretprobes), keyed by thread.
 *   Reads are accounted at their return (the plaintext is there then),
 *   writes at their entry (tls_write_enter says why).
 *   Go crypto/tls: (*Conn).Read at entry and at each of its RET
 *   instructions (a uretprobe would rewrite a return address on a
 *   goroutine stack the runtime moves), (*Conn).Write at entry only (its
 *   socket write ends it: go_write_sent), keyed by goroutine; the
 *   register ABI (Go 1.17+) has the receiver in RAX, the buffer in RBX,
 *   the count returned in RAX and the goroutine in R14.
 *
 * The uprobes reach a connection's state in tw_st_socks only (socket
 * storage is for BTF-typed hooks), where tls_plain put it. Part of
 * stream.bpf.c.
 */
#ifndef TOKENWIRE_STREAM_TLS_PROBES_H
#define TOKENWIRE_STREAM_TLS_PROBES_H

/* The first slice of the plaintext of a client's write call that returned
 * before its socket was known (tls_call.pend_ssl), by thread, as a request
 * record whose header is filled when the socket is. A thread has one at a
 * time; 256 threads' worth is 1 MiB. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, struct tls_call_key);
	__type(value, struct payload_buf);
} tw_st_tls_pend SEC(".maps");

/* begins_request says whether the n bytes of plaintext at buf begin an
 * HTTP request: only such a write call, on a connection whose socket is
 * not known yet, can be a client's request. */
static __always_inline int begins_request(__u64 buf, __s64 n)
{
	char m[4];
	if (n < (__s64)sizeof(m) || bpf_probe_read_user(m, sizeof(m), (const void *)buf))
		return 0;
	return (m[0] == 'P' && m[1] == 'O' && m[2] == 'S' && m[3] == 'T') ||
	       (m[0] == 'G' && m[1] == 'E' && m[2] == 'T' && m[3] == ' ') ||
	       (m[0] == 'P' && m[1] == 'U' && m[2] == 'T' && m[3] == ' ') ||
	       (m[0] == 'P' && m[1] == 'A' && m[2] == 'T' && m[3] == 'C') ||
	       (m[0] == 'D' && m[1] == 'E' && m[2] == 'L' && m[3] == 'E');
}

/* pend_copy copies the first slice of the n bytes of plaintext at buf to
 * the thread's pending record, if they begin an HTTP request: the write
 * calls of a probed process on connections it never tells a socket of
 * (a server's, on a port nobody watches) pay a 4-byte read, not the copy. */
static __always_inline int pend_copy(const struct tls_call_key *key, __u64 buf, __s64 n)
{
	if (!begins_request(buf, n))
		return -1;
	__u32 zero = 0;
	struct payload_buf *b = bpf_map_lookup_elem(&tw_st_buf, &zero);
	if (!b)
		return -1;
	__u64 len = read_size(n > TW_REQ_SLICE ? TW_REQ_SLICE : n, TW_REQ_SLICE);
	if (bpf_probe_read_user(b->data, len, (const void *)buf))
		return -1;
	b->h.id.len = len;
	b->h.total = n;
	return bpf_map_update_elem(&tw_st_tls_pend, key, b, BPF_ANY);
}

/* pend_send sends the thread's pending record, of a write call of n bytes,
 * as the first request bytes of the call just begun on sk. */
static __always_inline void pend_send(const struct tls_call_key *key, const struct sock *sk, struct stream_state *st,
				      __s64 n)
{
	struct payload_buf *p = bpf_map_lookup_elem(&tw_st_tls_pend, key);
	if (!p)
		return;
	if (p->h.total == (__u32)n && st->req_captured < request_capture_max) {
		__u64 len = p->h.id.len;
		if (len > request_capture_max - st->req_captured)
			len = request_capture_max - st->req_captured;
		len = read_size(len, TW_REQ_SLICE);
		payload_head(p, sk, st, TW_REC_REQUEST, 0, n);
		p->h.offset = st->req_captured;
		p->h.id.len = len;
		payload_output(p, sizeof(p->h) + len, 0);
	}
	st->req_captured += n;
	bpf_map_delete_elem(&tw_st_tls_pend, key);
}

/* plain_state is the state of a plaintext-driven TLS connection, if sk is
 * still the connection gen names. */
static __always_inline struct stream_state *plain_state(__u64 sk, __u64 gen)
{
	struct stream_state *st = bpf_map_lookup_elem(&tw_st_socks, &sk);
	if (!st || st->gen != gen || !(st->tls & TLS_PLAIN))
		return NULL;
	return st;
}

/* plain_request accounts n bytes of request read as plaintext: the start
 * of a request, or more of it; and captures them. */
static __always_inline void plain_request(const struct sock *sk, struct stream_state *st, const char *buf, __u64 n)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 arrived = st->rx_ts ? st->rx_ts : now;
	if (st->state == TW_ST_RESPONSE && (st->resp_flags & TW_RESP_CHUNKED) && !st->pending_req_ts) {
		/* Pipelined behind a chunked response still being written: it
		 * starts when that one's terminator ends it (as on_data_ready). */
		st->pending_req_ts = arrived;
		return;
	}
	if (st->state == TW_ST_REQUEST) {
		st->req_ts = arrived; /* the last byte of the request wins */
	} else {
		end_stream(sk, st, TW_END_NEXT_REQUEST, arrived);
		begin_stream(st, arrived, now);
	}
	capture_from(sk, st, buf, n, n);
}

/* plain_write accounts a write of n bytes of plaintext. */
static __always_inline void plain_write(const struct sock *sk, struct stream_state *st, const char *buf, __u64 n)
{
	if (st->state == TW_ST_IDLE && !st->ended_by_terminator)
		return;
	__u8 flags = peek_plain(sk, st, buf, n);
	account_write(sk, st, flags, n, bpf_ktime_get_ns());
}

/* tls_read_enter notes a read call of the TLS object ssl into buf, and
 * (SSL_read_ex) where its length will be. An _ex call that calls the
 * plain one with the same arguments (BoringSSL) is one call (nestable); a
 * call whose return was missed is replaced. A Go function that grows its
 * stack runs its entry again: the same call. */
static __always_inline int tls_read_enter(const struct tls_call_key *key, __u64 ssl, __u64 buf, __u64 lenp,
					  int nestable)
{
	struct tls_call *c = tls_call_of(key, 1);
	if (!c)
		return 0;
	if (nestable && !lenp && c->rd_ssl == ssl && c->rd_buf == buf && c->rd_lenp) {
		c->rd_nest++;
		return 0;
	}
	c->rd_ssl = ssl;
	c->rd_buf = buf;
	c->rd_lenp = lenp;
	c->rd_nest = 0;
	c->rd_sk = 0;
	return 0;
}

/* tls_write_enter accounts a write call of n bytes of plaintext at buf on
 * the TLS object ssl, at its entry: a response's last write is accounted
 * before its bytes can reach the client, and so before the client's next
 * request is read (a thread that reads the socket while another writes
 * could return from its read call first). Nested calls (BoringSSL's _ex
 * calling the plain one, Go's entry run again) and the retry of a write
 * that failed with the same arguments (nginx, non-blocking) are no new
 * write. A Go call has no return probe: the socket write inside it ends
 * it (go_write_sent), and one of no bytes, which writes nothing, is not
 * kept. */
static __always_inline int tls_write_enter(const struct tls_call_key *key, __u64 ssl, __u64 buf, __s64 n,
					   __u64 lenp, int nestable)
{
	struct tls_call *c = tls_call_of(key, 1);
	if (!c)
		return 0;
	if (c->wr_ssl == ssl && c->wr_buf == buf) {
		if (nestable)
			c->wr_nest++;
		return 0;
	}
	if (key->by_g && n <= 0) {
		c->wr_ssl = 0;
		return 0;
	}
	int retry = c->retry_ssl == ssl && c->retry_buf == buf;
	c->retry_ssl = 0;
	c->wr_ssl = ssl;
	c->wr_buf = buf;
	c->wr_lenp = lenp;
	c->wr_nest = 0;
	c->wr_n = n;
	c->wr_done = retry || n <= 0;
	if (retry || n <= 0)
		return 0;
	struct tls_conn_key ck = {.tgid = key->tgid, .ssl = ssl};
	struct tls_conn *conn = bpf_map_lookup_elem(&tw_st_tls_conns, &ck);
	__u64 sk = conn ? conn->sk : 0;
	struct stream_state *st = conn ? plain_state(sk, conn->gen) : NULL;
	if (!st) {
		/* Its socket is not known yet. A Go call is kept for the
		 * socket write inside it (client_note_write_by) only if it
		 * begins a request: a call on a socket nobody watches (a
		 * server's response, in a process that also calls out: an
		 * agent gateway) has no socket write that ends it, and the
		 * runtime gives its goroutine's g to a later goroutine, whose
		 * first write on a client's connection (its handshake) would
		 * take the call for its own. */
		if (key->by_g && !begins_request(buf, n))
			c->wr_done = 1;
		return 0;
	}
	c->wr_done = 1;
	if (st->client)
		client_plain_request((const struct sock *)sk, st, (const char *)buf, n);
	else
		plain_write((const struct sock *)sk, st, (const char *)buf, n);
	return 0;
}

/* call_bytes is how many bytes a call moved: its return value, or for an
 * _ex call (returning 1 on success) what it stored at lenp. */
static __always_inline __s64 call_bytes(__s64 ret, __u64 lenp)
{
	if (!lenp)
		return ret;
	__u64 n = 0;
	if (ret != 1 || bpf_probe_read_user(&n, sizeof(n), (const void *)lenp))
		return 0;
	return n;
}

/* tls_read_done handles a read call's return: it learns the TLS object's
 * socket from the socket read inside the call (the object reads its
 * socket itself) or just before it (memory BIO), or else knows it from
 * earlier (plaintext the library had buffered), and accounts the
 * plaintext. */
static __always_inline int tls_read_done(const struct tls_call_key *key, __s64 ret)
{
	struct tls_call *c = bpf_map_lookup_elem(&tw_st_tls_calls, key);
	if (!c || !c->rd_ssl)
		return 0;
	if (c->rd_nest) {
		c->rd_nest--;
		return 0;
	}
	__u64 buf = c->rd_buf, sk = c->rd_sk, gen = c->rd_gen;
	struct tls_conn_key ck = {.tgid = key->tgid, .ssl = c->rd_ssl};
	__s64 n = call_bytes(ret, c->rd_lenp);
	if (!sk) {
		sk = c->rx_sk;
		gen = c->rx_gen;
	}
	c->rd_ssl = 0;
	c->rd_sk = 0;
	c->rx_sk = 0;
	if (sk) {
		struct tls_conn conn = {.sk = sk, .gen = gen};
		bpf_map_update_elem(&tw_st_tls_conns, &ck, &conn, BPF_ANY);
	} else {
		struct tls_conn *conn = bpf_map_lookup_elem(&tw_st_tls_conns, &ck);
		if (!conn)
			return 0;
		sk = conn->sk;
		gen = conn->gen;
	}
	if (n <= 0)
		return 0;
	struct stream_state *st = plain_state(sk, gen);
	if (st && st->client)
		client_plain_read((const struct sock *)sk, st, (const char *)buf, n);
	else if (st)
		plain_request((const struct sock *)sk, st, (const char *)buf, n);
	return 0;
}

/* tls_write_done ends a write call of the OpenSSL API: one that was
 * accounted and failed is retried with the same arguments, which is no
 * new write; one that was not accounted (its socket unknown at its entry)
 * and began an HTTP request waits for the thread's next client socket
 * write (client_note_write_by). Any other would give its TLS object to a
 * socket write it did not make: a server's response on a socket nobody
 * watches, followed by the thread's client handshake. */
static __always_inline int tls_write_done(const struct tls_call_key *key, __s64 ret)
{
	struct tls_call *c = bpf_map_lookup_elem(&tw_st_tls_calls, key);
	if (!c || !c->wr_ssl)
		return 0;
	if (c->wr_nest) {
		c->wr_nest--;
		return 0;
	}
	__s64 n = call_bytes(ret, c->wr_lenp);
	if (n <= 0) {
		if (c->wr_done) { /* accounted: its retry is no new write */
			c->retry_ssl = c->wr_ssl;
			c->retry_buf = c->wr_buf;
		}
	} else if (!c->wr_done && !pend_copy(key, c->wr_buf, n)) {
		c->pend_ssl = c->wr_ssl;
		c->pend_n = n;
	}
	c->wr_ssl = 0;
	return 0;
}

/* client_note_write_by handles a socket write of a client's TLS
 * connection made inside the write call key is in (a library that writes
 * its socket itself: OpenSSL's socket BIO, Go): the call's TLS object is
 * that socket's, and its plaintext the request, unless accounted at the
 * call's entry already. After a write call that returned before its
 * socket was known (a memory BIO: Node's first request on a connection),
 * the write starts a call whose request is the first slice copied at that
 * call's return. */
static __always_inline void client_note_write_by(const struct tls_call_key *key, const struct sock *sk, __u64 gen)
{
	struct tls_call *c = bpf_map_lookup_elem(&tw_st_tls_calls, key);
	if (!c)
		return;
	__u64 ssl = c->wr_ssl;
	__s64 n = c->wr_n, pend = 0;
	if (ssl) {
		if (key->by_g)
			c->wr_ssl = 0; /* the call's end (go_write_sent) */
		/* Accounted at its entry, its socket known already; or, for
		 * Go, no request, and so perhaps a call its goroutine left on
		 * another socket, which is not its TLS object's. */
		if (c->wr_done)
			return;
		c->wr_done = 1;
	} else if (!(ssl = c->pend_ssl)) {
		return;
	} else {
		n = -1;
		pend = c->pend_n;
	}
	c->pend_ssl = 0;
	struct tls_conn_key ck = {.tgid = key->tgid, .ssl = ssl};
	struct tls_conn conn = {.sk = (__u64)sk, .gen = gen};
	bpf_map_update_elem(&tw_st_tls_conns, &ck, &conn, BPF_ANY);
	struct stream_state *st = plain_state((__u64)sk, gen);
	if (!st || !st->client)
		return;
	if (n > 0) {
		client_plain_request(sk, st, (const char *)c->wr_buf, n);
		return;
	}
	plain_read_now(st);
	client_request(sk, st, bpf_ktime_get_ns());
	if (pend > 0)
		pend_send(key, sk, st, pend);
}

/* tls_proc_reads says whether the calls of the current process are read:
 * only those of a process the stream probe has seen do TLS on a watched
 * connection (tw_st_tls_procs), and that user space has not found
 * unprobeable or left out. A library probed for every process that maps
 * it (streams.tls.system_wide) runs these programs in all of them; the
 * others leave here, at the cost of a map lookup. Which connections the
 * calls drive is the connections' business: a server's are plaintext-
 * driven only once user space marked its process probed (tls_begin), a
 * client's from its ClientHello (client_tls_begin). */
static __always_inline int tls_proc_reads(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tw_tls_proc *p = bpf_map_lookup_elem(&tw_st_tls_procs, &tgid);
	return p && p->state != TW_TLS_PROC_UNPROBEABLE;
}

static __always_inline struct tls_call_key thread_key(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct tls_call_key k = {.tgid = id >> 32, .id = id};
	return k;
}

static __always_inline struct tls_call_key goroutine_key(const struct pt_regs *ctx)
{
	struct tls_call_key k = {.tgid = bpf_get_current_pid_tgid() >> 32, .by_g = 1, .id = ctx->r14};
	return k;
}

/* ---- entry points: tw_tls_<call>, tw_tls_go_<call> ---- */

SEC("uprobe")
int BPF_KPROBE(tw_tls_rd, void *ssl, void *buf)
{
	if (!tls_proc_reads())
		return 0;
	struct tls_call_key k = thread_key();
	return tls_read_enter(&k, (__u64)ssl, (__u64)buf, 0, 1);
}

SEC("uprobe")
int BPF_KPROBE(tw_tls_rdex, void *ssl, void *buf, __u64 num, __u64 *readbytes)
{
	if (!tls_proc_reads())
		return 0;
	struct tls_call_key k = thread_key();
	return tls_read_enter(&k, (__u64)ssl, (__u64)buf, (__u64)readbytes, 1);
}

SEC("uretprobe")
int BPF_KRETPROBE(tw_tls_rd_ret, int ret)
{
	struct tls_call_key k = thread_key();
	return tls_read_done(&k, ret);
}

SEC("uprobe")
int BPF_KPROBE(tw_tls_wr, void *ssl, const void *buf, int num)
{
	if (!tls_proc_reads())
		return 0;
	struct tls_call_key k = thread_key();
	return tls_write_enter(&k, (__u64)ssl, (__u64)buf, num, 0, 1);
}

SEC("uprobe")
int BPF_KPROBE(tw_tls_wrex, void *ssl, const void *buf, __u64 num, __u64 *written)
{
	if (!tls_proc_reads())
		return 0;
	struct tls_call_key k = thread_key();
	return tls_write_enter(&k, (__u64)ssl, (__u64)buf, num, (__u64)written, 1);
}

SEC("uretprobe")
int BPF_KRETPROBE(tw_tls_wr_ret, int ret)
{
	struct tls_call_key k = thread_key();
	return tls_write_done(&k, ret);
}

SEC("uprobe")
int tw_tls_go_rd(struct pt_regs *ctx)
{
	if (!tls_proc_reads())
		return 0;
	struct tls_call_key k = goroutine_key(ctx);
	return tls_read_enter(&k, ctx->ax, ctx->bx, 0, 0);
}

SEC("uprobe")
int tw_tls_go_rdret(struct pt_regs *ctx)
{
	struct tls_call_key k = goroutine_key(ctx);
	return tls_read_done(&k, (__s64)ctx->ax);
}

SEC("uprobe")
int tw_tls_go_wr(struct pt_regs *ctx)
{
	if (!tls_proc_reads())
		return 0;
	struct tls_call_key k = goroutine_key(ctx);
	return tls_write_enter(&k, ctx->ax, ctx->bx, (__s64)ctx->cx, 0, 0);
}

#endif
