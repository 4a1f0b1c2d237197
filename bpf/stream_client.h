/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: the client side. A socket this host connected to a configured
 * remote port (an agent calling an LLM API), in a selected process, runs
 * the same state machine as a server socket with the directions swapped:
 *
 *   sent   the client's write is the request: the call starts when the
 *          request's last byte is written (a later write of the same
 *          request moves the start), and its bytes are captured like a
 *          server's request reads (stream_capture.h)
 *   recv   the client's read is the response: the first one is its head,
 *          later ones are body chunks, peeked for terminators and GenAI
 *          details as a server's writes are (stream_peek.h); a read of 0
 *          bytes (the server's FIN) ends it
 *   state  the client's close ends it; the server's FIN does not (the
 *          client may not have read what came before it)
 *
 * Selection costs a socket that is not a client of a configured port one
 * .rodata port test per event (no map lookup), after the server port
 * test. The process test runs at a connection's first write when its
 * process is selected (the connection is tracked from then), and at every
 * write of a process that is not.
 *
 * TLS (a ClientHello as the connection's first write): in a process whose
 * TLS library is probed (stream_tls.h), the library's calls drive the
 * machine with the plaintext: a write call is the request (accounted at
 * its entry when its TLS object's socket is known, else at the socket
 * write inside it, which tells the socket, or after it: a memory BIO,
 * timed only), a read call's return a response read. The socket hooks
 * then only tell the calls their socket, and a read of 0 bytes still ends
 * the call. A process not probed yet is reported to user space once, and
 * its connection is readied for plaintext all the same
 * (client_tls_begin): its calls are read from the first one its
 * library's uprobes see, and until then (TLS_WAIT) timed from their
 * record headers, as a connection of a process that cannot be probed is
 * throughout (opaque: stream_tls_records.h, with the directions swapped:
 * the client's application-data writes are its request, the first
 * application-data read after it starts the response, and every read that
 * begins such a record is a chunk). Part of stream.bpf.c.
 */
#ifndef TOKENWIRE_STREAM_CLIENT_H
#define TOKENWIRE_STREAM_CLIENT_H

#define MAX_CLIENT_PORTS 16
#define MAX_CLIENT_PIDS 16
#define MAX_CLIENT_COMMS 8

/* Set by user space (streams.clients): remote ports, and the processes
 * (by tgid or by name: the thread group leader's comm, 15 bytes and a
 * NUL, as /proc/PID/comm shows it) whose connections to them are
 * tracked. No pids and no names: every process. */
const volatile __u16 client_ports[MAX_CLIENT_PORTS] = {};
const volatile __u8 n_client_ports = 0;
const volatile __u32 client_pids[MAX_CLIENT_PIDS] = {};
const volatile __u8 n_client_pids = 0;
const volatile __u64 client_comms[MAX_CLIENT_COMMS][2] = {};
/* The bytes of a comm that client_comms[i] sets: its name and the NUL
 * after it. Before Linux 5.17 exec did not clear the comm past the new
 * name's NUL, so what follows it is the previous name's tail. */
const volatile __u64 client_comm_masks[MAX_CLIENT_COMMS][2] = {};
const volatile __u8 n_client_comms = 0;

/* client_port says whether sk's remote port is a configured one. */
static __always_inline int client_port(const struct sock *sk, const int typed)
{
	if (!n_client_ports)
		return 0;
	__u16 port = bpf_ntohs(RD(typed, sk, __sk_common.skc_dport));
	for (int i = 0; i < MAX_CLIENT_PORTS; i++) {
		if (i >= n_client_ports)
			return 0;
		if (client_ports[i] == port)
			return 1;
	}
	return 0;
}

/* client_process says whether the current process is selected. */
static __always_inline int client_process(void)
{
	if (!n_client_pids && !n_client_comms)
		return 1;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	for (int i = 0; i < MAX_CLIENT_PIDS; i++) {
		if (i >= n_client_pids)
			break;
		if (client_pids[i] == tgid)
			return 1;
	}
	if (!n_client_comms)
		return 0;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct task_struct *leader = BPF_CORE_READ(task, group_leader);
	__u64 comm[2] = {};
	if (bpf_probe_read_kernel(comm, sizeof(comm), &leader->comm))
		return 0;
	for (int i = 0; i < MAX_CLIENT_COMMS; i++) {
		if (i >= n_client_comms)
			return 0;
		if (client_comms[i][0] == (comm[0] & client_comm_masks[i][0]) &&
		    client_comms[i][1] == (comm[1] & client_comm_masks[i][1]))
			return 1;
	}
	return 0;
}

/* client_tls says whether the write the current syscall made (ret bytes)
 * starts with a TLS handshake record: the connection's ClientHello. */
static __always_inline int client_tls(int ret)
{
	struct user_io io;
	__u8 h[3];
	if (ret < 5 || syscall_io(&io) || io.iov[0].iov_len < 3 || bpf_probe_read_user(h, sizeof(h), io.iov[0].iov_base))
		return 0;
	return h[0] == 22 && h[1] == 3 && h[2] <= 4;
}

/* The first call of a client's TLS 1.3 connection timed from its records
 * (client_first_records): what its first records after the request were
 * taken for so far. */
enum held_record {
	HELD_NONE,    /* none read yet */
	HELD_RECORD,  /* one, held: a session ticket, or the response's start */
	HELD_TICKETS, /* session tickets; the last one's body may be unread */
	HELD_OVER,    /* the response started */
};

/* release_held accounts a record held back by client_first_records as the
 * response's start, at the time it was read, when nothing came after it:
 * its call ends now, or the client writes its next request. */
static __always_inline void release_held(const struct sock *sk, struct stream_state *st)
{
	if (st->rx_held != HELD_RECORD)
		return;
	st->rx_held = HELD_OVER;
	if (st->state == TW_ST_REQUEST)
		account_write(sk, st, 0, st->held_len + 5, st->held_ts);
}

/* client_end ends a client's call. */
static __always_inline void client_end(const struct sock *sk, struct stream_state *st, __u8 reason, __u64 now)
{
	release_held(sk, st);
	end_stream(sk, st, reason, now);
}

/* client_request starts the call whose request (or more of it) the
 * client is writing now, or moves its start to now. A record still held
 * (release_held) is dropped: the paths timed from records release it
 * first, and one read as plaintext has its response read so. */
static __always_inline void client_request(const struct sock *sk, struct stream_state *st, __u64 now)
{
	if (st->rx_held == HELD_RECORD)
		st->rx_held = HELD_OVER;
	if (st->state == TW_ST_REQUEST) {
		st->req_ts = now; /* the request's last byte moves the start */
		return;
	}
	/* A new request on a kept-alive connection ends the previous
	 * response, if nothing else did. */
	end_stream(sk, st, TW_END_NEXT_REQUEST, now);
	begin_stream(st, now, now);
	st->pid = bpf_get_current_pid_tgid() >> 32;
}

/* plain_read_now says a call of a connection readied for plaintext was
 * read: its record headers no longer time it. */
static __always_inline void plain_read_now(struct stream_state *st)
{
	if (!(st->tls & TLS_WAIT))
		return;
	st->tls &= ~TLS_WAIT;
	count(&tw_st_counters, TW_ST_COUNTER_TLS_PLAIN);
}

/* client_plain_request accounts n bytes of request plaintext at buf that
 * a client handed its TLS library. */
static __always_inline void client_plain_request(const struct sock *sk, struct stream_state *st, const char *buf,
						 __s64 n)
{
	if (n <= 0)
		return;
	plain_read_now(st);
	client_request(sk, st, bpf_ktime_get_ns());
	capture_from(sk, st, buf, n, n);
}

/* client_plain_read accounts n bytes of response plaintext at buf that a
 * client's TLS library returned. */
static __always_inline void client_plain_read(const struct sock *sk, struct stream_state *st, const char *buf,
					      __s64 n)
{
	if (n <= 0)
		return;
	plain_read_now(st);
	if (st->state == TW_ST_IDLE)
		return;
	__u64 now = bpf_ktime_get_ns();
	account_write(sk, st, peek_plain(sk, st, buf, n), n, now);
}

/* client_hello sends user space the ClientHello (ret bytes, its first
 * TW_REQ_SLICE) a client connection began with, once per connection: its
 * server name (SNI) is the server.address of the connection's calls whose
 * requests, and so their Host header, are not read. */
static __always_inline void client_hello(const struct sock *sk, const struct stream_state *st, int ret)
{
	struct user_io io;
	if (syscall_io(&io))
		return;
	__u64 n = io.iov[0].iov_len < (__u64)ret ? io.iov[0].iov_len : (__u64)ret;
	struct payload_buf *b = payload_start(sk, st, TW_REC_TLS_HELLO, 0, ret);
	if (b)
		payload_send(b, io.iov[0].iov_base, n < TW_REQ_SLICE ? n : TW_REQ_SLICE);
}

/* client_tls_begin marks a client connection that began with a
 * ClientHello as TLS, and readies it for plaintext unless its process is
 * known to have no library the probes know: if it is never probed, the
 * record headers time it all the same (TLS_WAIT), and when it is (a file
 * probed system-wide, or user space probing it now that it was told), the
 * connection's calls are read from the first one probed. */
static __always_inline void client_tls_begin(const struct sock *sk, struct stream_state *st)
{
	tls_begin(sk, st);
	if (!tls_uprobes || (st->tls & TLS_PLAIN))
		return;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct tw_tls_proc *p = bpf_map_lookup_elem(&tw_st_tls_procs, &tgid);
	if (p && p->state == TW_TLS_PROC_UNPROBEABLE)
		return;
	tls_plain(sk, st, 0);
}

/* waiting returns the state of a connection readied for plaintext no
 * call of which was read yet (TLS_WAIT), or NULL. It waits for a call,
 * not for its process to be probed: a probe that attaches during a read
 * call misses the call's entry, and so its bytes, and a socket read that
 * both the records and the call it feeds account is one chunk (chunk
 * coalesces them). The socket's own copy of a moved state (st) drops
 * TLS_WAIT once the state did, so that no later event looks it up. */
static __always_inline struct stream_state *waiting(const struct sock *sk, struct stream_state *st)
{
	if (!(st->tls & TLS_WAIT))
		return NULL;
	struct stream_state *real = st;
	if ((st->tls & TLS_MOVED) && !(real = moved_state(sk)))
		return NULL;
	if (real->tls & TLS_WAIT)
		return real;
	st->tls &= ~TLS_WAIT;
	return NULL;
}

/* client_send_opaque accounts a write of ret bytes by a client on a TLS
 * connection no uprobe reads: its request's application data starts the
 * call, or moves its start. */
static __always_inline void client_send_opaque(const struct sock *sk, struct stream_state *st, __u64 ret)
{
	if (!request_records(st, ret, &st->tx_left))
		return;
	release_held(sk, st);
	client_request(sk, st, bpf_ktime_get_ns());
	st->rx_mark = BPF_CORE_READ((const struct tcp_sock *)sk, rcv_nxt);
}

/* client_first_records decides, for a read of the first call of a
 * client's TLS 1.3 connection timed from its records, that the records
 * it walked (w; app: response_records' verdict) start the response, or
 * not yet. A server that sends its session tickets once it has read the
 * client's Finished (OpenSSL, BoringSSL) sends them after a request
 * written with the Finished (Node) or right after it (OpenSSL's socket
 * BIO), and a ticket is application data to the record headers. Those
 * servers send two tickets of one length. So the first small record is
 * held: a next one of the same length makes both tickets (and any more of
 * that length), the response starting after them; one of another length,
 * or the call's end, makes the held record the response's start, at the
 * time it was read (release_held). Two tickets read at once are told
 * apart as the server's are (response_records). */
static __always_inline int client_first_records(const struct sock *sk, struct stream_state *st,
						const struct record_walk *w, int app)
{
	if (!w->begun) { /* more of the record the last read began */
		if (st->rx_held == HELD_NONE)
			st->rx_held = HELD_OVER;
		return st->rx_held == HELD_OVER ? app : 0;
	}
	if (st->rx_held == HELD_NONE) {
		if (!w->same || w->len0 >= TLS_TICKET_MAX_LEN) {
			st->rx_held = HELD_OVER;
			return app;
		}
		st->held_len = w->len0;
		if (w->begun >= 2) {
			st->rx_held = HELD_TICKETS;
		} else {
			st->rx_held = HELD_RECORD;
			st->held_ts = bpf_ktime_get_ns();
		}
		return 0;
	}
	if (w->len0 == st->held_len) { /* one more ticket */
		st->rx_held = w->same ? HELD_TICKETS : HELD_OVER;
		return !w->same; /* else records after it start the response */
	}
	release_held(sk, st);
	st->rx_held = HELD_OVER;
	return app;
}

/* client_recv_opaque accounts a read of ret bytes by a client on a TLS
 * connection no uprobe reads: a chunk when it begins a record of the
 * response's, which the first one is only if it holds bytes the server
 * sent after it could have read the request (rx_mark), and is no session
 * ticket (client_first_records). */
static __always_inline void client_recv_opaque(const struct sock *sk, struct stream_state *st, __u64 ret)
{
	struct record_walk w = {};
	int app = response_records(st, ret, &st->rx_left, &st->rx_app, &w);
	if (st->state == TW_ST_IDLE)
		return;
	if (st->state == TW_ST_REQUEST) {
		if ((__s32)(BPF_CORE_READ((const struct tcp_sock *)sk, copied_seq) - st->rx_mark) <= 0)
			return;
		if (st->tls13 && st->seq == 1 && st->rx_held != HELD_OVER)
			app = client_first_records(sk, st, &w, app);
	}
	if (!app)
		return;
	if (!w.begun && st->state == TW_ST_RESPONSE) {
		/* More of a record whose header an earlier read began, and
		 * counted: OpenSSL's socket BIO reads a header, then its body,
		 * however long its process waits between the two. */
		st->bytes += ret;
		return;
	}
	account_write(sk, st, 0, ret, bpf_ktime_get_ns());
}

/* client_tls_sent handles a socket write of ret bytes of a client's TLS
 * connection: one whose process got probed since it began becomes
 * plaintext-driven now; a plaintext-driven one tells the write call in
 * flight its socket; one whose calls are not read is timed from its
 * records. */
static __noinline int client_tls_sent(const struct sock *sk, struct stream_state *st, int ret)
{
	if (!(st->tls & TLS_PLAIN)) {
		__u32 tgid = bpf_get_current_pid_tgid() >> 32;
		struct tw_tls_proc *p = bpf_map_lookup_elem(&tw_st_tls_procs, &tgid);
		if (p && p->state == TW_TLS_PROC_PROBED)
			tls_plain(sk, st, p->libs);
	}
	if (st->tls & TLS_PLAIN) {
		note_call(sk, st, 1);
		st = waiting(sk, st);
	}
	if (st)
		client_send_opaque(sk, st, ret);
	return 0;
}

/* capture_write captures what the current write syscall (ret bytes) wrote
 * as request bytes, from up to two of its buffers (a client that writes
 * the head and the body as two buffers of one writev). */
static __noinline void capture_write(const struct sock *sk, struct stream_state *st, int ret)
{
	if (st->req_captured >= request_capture_max)
		return;
	struct user_io io;
	if (syscall_io(&io))
		return;
	__u64 n = io.iov[0].iov_len < (__u64)ret ? io.iov[0].iov_len : (__u64)ret;
	capture_from(sk, st, io.iov[0].iov_base, n, n);
	if (io.nr > 1 && n < (__u64)ret)
		capture_from(sk, st, io.iov[1].iov_base, io.iov[1].iov_len, ret - n);
}

/* client_sent handles a write of ret bytes on a socket that is not a
 * watched server's: on a client connection to a configured port, the
 * request (or more of it). */
static __always_inline int client_sent(const struct sock *sk, int ret, const int typed)
{
	if (!client_port(sk, typed))
		return 0;
	struct stream_state *st = state_of(sk);
	__u64 now = bpf_ktime_get_ns();
	if (!st) {
		if (!client_process() || !(st = track(sk, typed, now)))
			return 0;
		st->client = 1;
		if (client_tls(ret)) {
			client_tls_begin(sk, st);
			client_hello(sk, st, ret);
			return 0; /* the ClientHello: one record, no request */
		}
	}
	if (!st->client)
		return 0;
	if (st->tls)
		return client_tls_sent(sk, st, ret);
	client_request(sk, st, now);
	capture_write(sk, st, ret);
	return 0;
}

/* client_recv handles a read of ret bytes (0: the server's FIN) on a
 * socket that is not a watched server's: on a client connection, the
 * response's head or a body chunk. */
static __always_inline int client_recv(const struct sock *sk, int ret, const int typed)
{
	if (!client_port(sk, typed))
		return 0;
	struct stream_state *st = state_of(sk);
	if (!st || !st->client)
		return 0;
	if (st->tls) {
		if (ret > 0 && (st->tls & TLS_PLAIN)) {
			note_call(sk, st, 0); /* for the read call that gets its bytes */
			if (!(st = waiting(sk, st)))
				return 0;
		} else if ((st->tls & TLS_MOVED) && !(st = moved_state(sk))) {
			return 0;
		}
		if (ret > 0) {
			client_recv_opaque(sk, st, ret);
			return 0;
		}
	}
	if (st->state == TW_ST_IDLE)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (ret == 0) {
		client_end(sk, st, TW_END_CLOSE, now);
		return 0;
	}
	__u8 flags = peek_sent(sk, st, ret, 0, NULL, 0);
	account_write(sk, st, flags, ret, now);
	return 0;
}

/* client_state handles the socket state changes of a client connection:
 * the client's own close ends its call; the server's FIN waits for the
 * client to read up to it (client_recv). */
static __always_inline int client_state(const struct sock *sk, struct stream_state *st, int newstate, __u64 now,
					int moved)
{
	if (newstate == TCP_CLOSE_WAIT)
		return 0;
	__u8 reason = TW_END_CLIENT_CLOSED;
	if (newstate != TCP_FIN_WAIT1) {
		int err = BPF_CORE_READ(sk, sk_err);
		reason = err == ECONNRESET || err == EPIPE ? TW_END_RESET : TW_END_CLOSE;
	}
	client_end(sk, st, reason, now);
	if (newstate != TCP_FIN_WAIT1)
		forget(sk, moved);
	return 0;
}

#endif
