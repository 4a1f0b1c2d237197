/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams over TLS. A server socket whose first bytes are a ClientHello is
 * a TLS connection; how it is read depends on its process:
 *
 *   probed (user space attached uprobes to its TLS library's read and
 *   write functions, tw_st_tls_procs): the plaintext drives the state
 *   machine. A read call's return starts a request and captures it, a
 *   write call's return is a response write, peeked and accounted like a
 *   plaintext one, with plaintext byte counts. The socket hooks then only
 *   note when bytes arrive (the request's time) and which socket a read
 *   call read from: so the uprobes learn which socket a TLS object (SSL *,
 *   *tls.Conn) is, in a bounded map. Writes on the socket itself
 *   (ciphertext, handshake, tickets, alerts) are not looked at.
 *
 *   otherwise: its record headers time it (stream_tls_records.h), and user
 *   space is told once about the process, so that it can probe it.
 *
 * A read call and the socket read that feeds it are matched by thread
 * (goroutine for Go): inside the call with the socket as the TLS object's
 * BIO (nginx, curl, Go), or just before it with memory BIOs (Python's
 * asyncio, Node), which read the socket and then hand the bytes to
 * SSL_read on the same thread. Part of stream.bpf.c.
 */
#ifndef TOKENWIRE_STREAM_TLS_H
#define TOKENWIRE_STREAM_TLS_H

/* Processes that serve a watched port with TLS, by tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct tw_tls_proc);
} tw_st_tls_procs SEC(".maps");

/* A thread's (or goroutine's) TLS calls in flight, and the watched TLS
 * socket it read last that no read call claimed yet. */
struct tls_call_key {
	__u32 tgid;
	__u32 by_g; /* id is a goroutine (Go), not a thread */
	__u64 id;
};

struct tls_call {
	__u64 rd_ssl, rd_buf, rd_lenp; /* a read call: its TLS object, buffer, SSL_read_ex's length */
	__u64 rd_sk, rd_gen;           /* a watched socket read inside it */
	__u64 wr_ssl, wr_buf, wr_lenp; /* a write call */
	__u64 retry_ssl, retry_buf;    /* a write call that failed: its retry is no new write */
	__u64 rx_sk, rx_gen;           /* the socket read last, unclaimed */
	__u32 rd_nest, wr_nest;        /* calls of the same call inside it (an _ex wrapping the other) */
	__s64 wr_n;                    /* a write call's plaintext bytes */
	__u32 wr_done;                 /* ... accounted already (a client's request: stream_client.h) */
	__u32 _pad;
	/* A client's write call that returned before its socket was known
	 * (a memory BIO: the socket is written after the call): it starts a
	 * call at the thread's next write of a client TLS socket. Its
	 * plaintext buffer may be freed by then (Node frees the copy it
	 * makes of a request written before the handshake ended), so its
	 * first slice was copied at its return (tw_st_tls_pend): pend_n
	 * bytes. */
	__u64 pend_ssl;
	__s64 pend_n;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tls_call_key);
	__type(value, struct tls_call);
} tw_st_tls_calls SEC(".maps");

/* Which socket a TLS object is, and the generation of the socket's state
 * then (a freed and reused object or socket is not mistaken). */
struct tls_conn_key {
	__u32 tgid;
	__u32 _pad;
	__u64 ssl;
};

struct tls_conn {
	__u64 sk;
	__u64 gen;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct tls_conn_key);
	__type(value, struct tls_conn);
} tw_st_tls_conns SEC(".maps");

/* Set by user space: processes can be probed (streams.tls), so the ones
 * that read TLS on a watched port are worth telling it about. */
const volatile __u8 tls_uprobes = 0;

/* moved_state is the state of a socket whose state moved to tw_st_socks. */
static __always_inline struct stream_state *moved_state(const struct sock *sk)
{
	__u64 key = (__u64)sk;
	return bpf_map_lookup_elem(&tw_st_socks, &key);
}

/* tls_discover tells user space, once, that a process it does not know of
 * reads TLS on a watched port or sends it to a client port. Woken at
 * once: the sooner it is probed, the fewer of its streams stay opaque. */
static __always_inline void tls_discover(__u32 tgid)
{
	struct tw_tls_proc seen = {.state = TW_TLS_PROC_SEEN};
	if (bpf_map_update_elem(&tw_st_tls_procs, &tgid, &seen, BPF_NOEXIST))
		return;
	struct stream_payload *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		count(&tw_st_counters, TW_ST_COUNTER_RINGBUF_LOST);
		return;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->id.kind = TW_REC_TLS_PROC;
	r->ts_ns = bpf_ktime_get_ns();
	r->pid = tgid;
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
}

static __always_inline __u8 lib_flags(__u8 libs)
{
	return (libs & TW_TLS_LIB_OPENSSL ? TLS_C : 0) | (libs & TW_TLS_LIB_GO ? TLS_GO : 0);
}

/* tls_plain makes a TLS connection of a probed process plaintext-driven,
 * its state where the uprobes can reach it. libs 0: a client's, readied
 * before its process is probed (client_tls_begin), timed from its records
 * until a call of it is read (TLS_WAIT); its libraries are learnt at a
 * socket event after (tls_learn_libs). */
static __always_inline void tls_plain(const struct sock *sk, struct stream_state *st, __u8 libs)
{
	__u8 tls = TLS_SEEN | TLS_PLAIN | lib_flags(libs) | (libs || !st->client ? 0 : TLS_WAIT);
	st->tls = tls;
	if (state_in_sk) {
		__u64 key = (__u64)sk;
		/* BPF_ANY: an entry at this address is a closed socket's. */
		if (bpf_map_update_elem(&tw_st_socks, &key, st, BPF_ANY)) {
			count(&tw_st_counters, TW_ST_COUNTER_TLS_NO_ROOM);
			st->tls = TLS_SEEN;
			return;
		}
		st->tls = tls | TLS_MOVED;
	}
	if (!(tls & TLS_WAIT))
		count(&tw_st_counters, TW_ST_COUNTER_TLS_PLAIN); /* else at its first call read */
}

/* tls_learn_libs gives a plaintext-driven connection readied before its
 * process was probed the libraries it has been probed for since, if any. */
static __always_inline void tls_learn_libs(struct stream_state *st)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tw_tls_proc *p = bpf_map_lookup_elem(&tw_st_tls_procs, &tgid);
	if (!p || p->state != TW_TLS_PROC_PROBED || !lib_flags(p->libs))
		return;
	st->tls |= lib_flags(p->libs);
}

/* tls_begin marks a connection that began with a ClientHello as TLS:
 * plaintext-driven when its process is probed, else user space hears of
 * the process (once). */
static __always_inline void tls_begin(const struct sock *sk, struct stream_state *st)
{
	st->tls = TLS_SEEN;
	count(&tw_st_counters, TW_ST_COUNTER_TLS);
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tw_tls_proc *p = bpf_map_lookup_elem(&tw_st_tls_procs, &tgid);
	if (!p) {
		if (tls_uprobes)
			tls_discover(tgid);
	} else if (p->state == TW_TLS_PROC_PROBED) {
		tls_plain(sk, st, p->libs);
	}
}

/* tls_client_hello looks at the first read of a connection (ret bytes):
 * if it is a TLS ClientHello (or its record header alone, as OpenSSL
 * reads it), the connection is TLS, and the read is no request: the
 * caller passes it to tls_recv. */
static __always_inline int tls_client_hello(const struct sock *sk, struct stream_state *st, int ret)
{
	struct user_io io;
	__u8 h[5];
	if (ret < 5 || syscall_io(&io) || io.iov[0].iov_len < 5 || bpf_probe_read_user(h, sizeof(h), io.iov[0].iov_base))
		return 0;
	if (h[0] != 22 || h[1] != 3 || h[2] > 4)
		return 0;
	st->state = TW_ST_IDLE; /* no END: this was no request */
	tls_begin(sk, st);
	return 1;
}

/* tls_call_of returns the calls of key, made when create is set. */
static __always_inline struct tls_call *tls_call_of(const struct tls_call_key *key, int create)
{
	struct tls_call *c = bpf_map_lookup_elem(&tw_st_tls_calls, key);
	if (c || !create)
		return c;
	struct tls_call zero = {};
	bpf_map_update_elem(&tw_st_tls_calls, key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&tw_st_tls_calls, key);
}

/* note_read_by tells the read call in flight of key its socket, and the
 * next read call too: a memory BIO reads the socket before the call, and
 * a server's first request may come with the handshake, read by the same
 * goroutine (Go) before it calls its first read. Not a client's socket
 * by goroutine: a client writes before it reads, which tells its socket,
 * and the goroutine that did a client's handshake (net/http's dialer)
 * makes no read call; its key outlives it (the runtime reuses its g), and
 * the socket would be taken for the TLS object of the first read call of
 * a later goroutine on that g, a server's included. */
static __always_inline void note_read_by(struct tls_call_key *key, const struct sock *sk, struct stream_state *st)
{
	struct tls_call *c = tls_call_of(key, 1);
	if (!c)
		return;
	__u64 gen = st->gen;
	if (!key->by_g || !st->client) {
		c->rx_sk = (__u64)sk;
		c->rx_gen = gen;
	}
	if (c->rd_ssl) {
		c->rd_sk = (__u64)sk;
		c->rd_gen = gen;
	}
}

/* client_note_write_by (stream_tls_probes.h) tells a client's TLS write
 * call in flight its socket, and accounts its plaintext. */
static __always_inline void client_note_write_by(const struct tls_call_key *key, const struct sock *sk, __u64 gen);

/* note_call records that the current thread (and goroutine) read the
 * plaintext-driven TLS socket sk, for the read call that gets its bytes;
 * or (write, a client's connection) wrote it, for the write call in
 * flight. While its libraries are not known (a client's connection
 * readied before its process was probed), by thread: the key of the
 * OpenSSL API, whose memory-BIO users (Node) read the socket just before
 * the read call that may be the first one probed. */
static __always_inline void note_call(const struct sock *sk, struct stream_state *st, const int write)
{
	if (!(st->tls & (TLS_C | TLS_GO)))
		tls_learn_libs(st);
	__u64 id = bpf_get_current_pid_tgid();
	struct tls_call_key key = {.tgid = id >> 32};
	if ((st->tls & TLS_C) || !(st->tls & TLS_GO)) {
		key.id = id;
		if (write)
			client_note_write_by(&key, sk, st->gen);
		else
			note_read_by(&key, sk, st);
	}
	if (st->tls & TLS_GO) {
		key.by_g = 1;
		key.id = user_r14();
		if (key.id && write)
			client_note_write_by(&key, sk, st->gen);
		else if (key.id)
			note_read_by(&key, sk, st);
	}
}

/* The socket hooks on a TLS connection (st->tls set). */

static __always_inline void tls_arrival(const struct sock *sk, struct stream_state *st, __u64 now)
{
	if (st->tls & TLS_MOVED)
		st = moved_state(sk);
	if (st)
		st->rx_ts = now;
}

static __always_inline void tls_recv(const struct sock *sk, struct stream_state *st, int ret)
{
	if (st->tls & TLS_PLAIN)
		note_call(sk, st, 0);
	else
		tls_recv_opaque(sk, st, ret);
}

/* go_write_sent ends the Go write call in flight of the goroutine that
 * writes a plaintext-driven socket: (*Conn).Write writes its records to
 * the socket itself, before it returns, and after its entry can run again
 * (a stack growth runs the prologue again). So a later call with the same
 * arguments (net/http flushes the same bufio buffer every time) is a new
 * write. A probe on the call's RET instructions would do the same, at the
 * cost of a trap the kernel single-steps (bench/uprobetrap). */
static __always_inline void go_write_sent(void)
{
	struct tls_call_key key = {.tgid = bpf_get_current_pid_tgid() >> 32, .by_g = 1, .id = user_r14()};
	if (!key.id)
		return;
	struct tls_call *c = bpf_map_lookup_elem(&tw_st_tls_calls, &key);
	if (c)
		c->wr_ssl = 0;
}

/* tls_sent handles a socket write of ret bytes on a server's TLS
 * connection: timed from its records when no uprobe reads its plaintext;
 * otherwise the uprobes account it, and on a Go server it ends the
 * goroutine's write call in flight (go_write_sent). */
static __noinline int tls_sent(const struct sock *sk, struct stream_state *st, int ret)
{
	if (!(st->tls & TLS_PLAIN))
		return tls_send_opaque(sk, st, ret);
	/* Its plaintext writes are accounted by the uprobes. */
	if (st->tls & TLS_GO)
		go_write_sent();
	return 0;
}

#endif
