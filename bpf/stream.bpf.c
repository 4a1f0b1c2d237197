//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Streams: time to first token, chunk intervals, bytes and duration of
 * streamed responses, per server socket.
 *
 * Four kernel events drive a small state machine per watched socket:
 *   ready  request bytes reached the socket (softirq):
 *          IDLE/RESPONSE -> REQUEST, request time = now
 *   recv   the application read them: copy the request's head from its
 *          buffer (method, path, headers, model)
 *   sent   a write finished with its byte count: the first one starts the
 *          response (its head is sent to user space), later ones are body
 *          chunks; its last bytes show a terminator
 *   state  close, peer close or reset ends the stream
 * The bytes come from the reading or writing syscall's own buffers
 * (syscall_io.h), so every hook type sees them the same way.
 *
 * Each event has a program per hook type; user space attaches the first
 * one the kernel accepts. The tracepoints (sock:sk_data_ready,
 * sock:sock_recv_length, sock:sock_send_length) exist from Linux 6.4; on
 * older kernels fentry/fexit or kprobes on the functions behind them for
 * TCP (sock_def_readable, tcp_recvmsg, tcp_sendmsg_locked) give the same
 * events with the same arguments.
 *
 * Client connections (to configured remote ports) run the same machine
 * with the directions swapped: stream_client.h.
 *
 * Per-chunk work updates the socket's state in place (no upsert, no
 * record): the chunk-interval histogram lives in the state and reaches user
 * space in a PROGRESS record at most once per flush interval, and in the
 * END record. Ring-buffer traffic is per stream, not per chunk.
 *
 * What a body chunk's write runs on a BTF-typed hook, where the kernel's
 * copy of its last bytes is at hand (stream_frag.h), is inlined into the
 * hooks' programs. What runs once per stream or connection, or only off
 * that path (a response's head, a record to user space, a read of the
 * writer's memory, TLS, a client's request), is a __noinline subprogram:
 * one copy, called. A chunk's path then spans fewer cache lines of
 * program text, which are cold when the host's writes are sparse, and a
 * hook's frame holds only its own locals. The verifier limits a chain of
 * frames to 512 bytes: the deepest, a client's TLS write (tw_st_sent_*,
 * client_tls_sent, end_stream, emit_stats), takes 480 built by clang 19.
 */
#include "vmlinux.h"
#include "bpf_helpers.h"
#include "bpf_core_read.h"
#include "bpf_tracing.h"
#include "bpf_endian.h"
#include "tokenwire.h"
#include "common.h"

#define ECONNRESET 104
#define EPIPE 32
#define MSG_PEEK 2
#define RCV_SHUTDOWN 1
#include "ringbuf.h"
#include "syscall_io.h"
#include "stream_frag.h"
#include "stream_state.h"
#include "stream_capture.h"
#include "stream_peek.h"
#include "stream_write.h"
#include "stream_tls_records.h"
#include "stream_tls.h"
#include "stream_client.h"
#include "stream_tls_probes.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const struct stream_payload *unused_stream_payload __attribute__((unused));
const struct stream_stats *unused_stream_stats __attribute__((unused));
const enum tw_stream_record *unused_tw_stream_record __attribute__((unused));
const enum tw_end_reason *unused_tw_end_reason __attribute__((unused));
const enum tw_stream_counter *unused_tw_stream_counter __attribute__((unused));
const enum tw_response_flag *unused_tw_response_flag __attribute__((unused));
const enum tw_body_flag *unused_tw_body_flag __attribute__((unused));
const enum tw_stream_state *unused_tw_stream_state __attribute__((unused));
const enum tw_stats_flag *unused_tw_stats_flag __attribute__((unused));
const enum tw_tls_proc_state *unused_tw_tls_proc_state __attribute__((unused));
const enum tw_tls_lib *unused_tw_tls_lib __attribute__((unused));
const struct tw_tls_proc *unused_tw_tls_proc __attribute__((unused));

/* ---- the four events ---- */

static __always_inline int on_data_ready(const struct sock *sk, const int typed)
{
	if (!watched_sock(sk, typed) || RD(typed, sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	/* Only new bytes make a request, not a pure ACK or the peer's FIN,
	 * which takes a sequence number of its own. tcp_sock fields go
	 * through probe reads: the typed argument is a struct sock. */
	__u32 nxt = BPF_CORE_READ(tp, rcv_nxt);
	__s32 unread = nxt - BPF_CORE_READ(tp, copied_seq);
	int fin = RD(typed, sk, sk_shutdown) & RCV_SHUTDOWN;
	if (fin)
		unread--;
	if (unread <= 0)
		return 0;

	__u64 now = bpf_ktime_get_ns();
	struct stream_state *st = track(sk, typed, now);
	if (!st)
		return 0;
	if (st->tls) {
		/* Which bytes are a request is for the reads to tell. */
		tls_arrival(sk, st, now);
		return 0;
	}
	/* The FIN's own wake-up (it takes a sequence number, past the bytes
	 * of the last arrival): the unread bytes it finds are ones the
	 * server left (a body it did not read), not a request. */
	if (fin && nxt == st->rx_mark + 1)
		return 0;
	st->rx_mark = nxt;
	/* A request can come before the write that ended the response
	 * before it has been reported: the write hooks run once tcp_sendmsg
	 * has queued the bytes, and on loopback delivered them (the
	 * tracepoint after the socket's lock is released; fexit and
	 * kretprobe under it, but a write that waits for buffer space
	 * releases it), so the client may have read them and sent its next
	 * request. Such a request waits (pending_req_ts) for that report,
	 * as one pipelined behind a chunked response waits for its
	 * terminator. More of it with nothing written since (a request in
	 * several segments) is the same request, from its last byte; after
	 * a write it is a second one, which does not wait: a missed
	 * terminator costs at most one request. */
	__u32 sent = BPF_CORE_READ(tp, write_seq);
	if (st->state == TW_ST_REQUEST && sent == st->req_seq) {
		st->req_ts = now; /* the last byte of the request wins */
		return 0;
	}
	/* In REQUEST state: bytes were queued since the request came and
	 * not reported yet (a reported write begins the response or moves
	 * req_seq, account_write), or never (answer_sent). */
	if ((st->state == TW_ST_REQUEST || (st->state == TW_ST_RESPONSE && (st->resp_flags & TW_RESP_CHUNKED))) &&
	    (!st->pending_req_ts || sent == st->pending_seq)) {
		st->pending_req_ts = now;
		st->pending_seq = sent;
		return 0;
	}
	end_stream(sk, st, TW_END_NEXT_REQUEST, now);
	begin_stream(st, now, now);
	st->req_seq = sent;
	return 0;
}

static __always_inline int on_recv_length(const struct sock *sk, int ret, int flags, const int typed)
{
	/* A peek leaves the bytes queued: the read that takes them comes next. */
	if (ret < 0 || (flags & MSG_PEEK))
		return 0;
	if (!watched_sock(sk, typed))
		return client_recv(sk, ret, typed);
	if (ret == 0)
		return 0;
	struct stream_state *st = state_of(sk);
	if (!st)
		return 0;
	if (st->tls) {
		tls_recv(sk, st, ret);
		return 0;
	}
	if (st->state != TW_ST_REQUEST)
		return 0;
	/* The first read of a connection: a TLS ClientHello? */
	if (st->seq == 1 && st->req_captured == 0 && tls_client_hello(sk, st, ret)) {
		tls_recv(sk, st, ret);
		return 0;
	}
	capture_request(sk, st, ret);
	return 0;
}

/* on_send_length accounts a write of ret bytes on sk. typed: sk is a BTF
 * pointer (fexit, tp_btf); it: the write's iterator after
 * tcp_sendmsg_locked (fexit, kretprobe), else NULL (body_flags). */
static __always_inline int on_send_length(const struct sock *sk, int ret, const int typed,
					  const struct iov_iter *it)
{
	if (ret <= 0)
		return 0;
	if (!watched_sock(sk, typed))
		return client_sent(sk, ret, typed);
	struct stream_state *st = state_of(sk);
	if (!st)
		return 0;
	if (st->tls)
		return tls_sent(sk, st, ret);
	/* In IDLE only a response right after a chunked one ended is looked
	 * at: the answer to a request pipelined behind it. */
	if (st->state == TW_ST_IDLE && !st->ended_by_terminator)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 fin = st->fin_ts;
	/* A FIN is pending (on_state): this write is the client's if its
	 * bytes began before the FIN came (fin_seq), and the stream ends at
	 * the FIN either way. */
	if (!fin || seq_before(write_began(sk, ret), st->fin_seq)) {
		__u8 flags = peek_sent(sk, st, ret, typed, it, 1);
		account_write(sk, st, flags, ret, fin ? fin : now);
	}
	if (fin)
		end_stream(sk, st, TW_END_CLIENT_CLOSED, fin);
	return 0;
}

/* defer_end_at_fin defers the end of a plaintext server's stream at the
 * client's FIN, which came at now, to what the socket does next.
 *   - During a response, or after bytes were queued for the request
 *     under way (write_seq has moved since req_seq) but before their
 *     write was reported: such a write may be reported after the FIN.
 *     sock_send_length fires once tcp_sendmsg has released the socket,
 *     and in between the client can read those bytes (a terminator, a
 *     whole response) and close, its FIN taken from the backlog by
 *     release_sock or, on a busy or emulated CPU, by another CPU after
 *     it; a write that waits for buffer space releases the socket too.
 *     The end waits for the socket's next write report (its bytes count
 *     if they began before the FIN) or its close (fin_ts).
 *   - With nothing queued for the request: the client half-closed
 *     (shutdown) and waits for its answer, or closed and gave up; the
 *     same FIN. The answer, if one comes, is the stream's response: it
 *     ends as any does, or when the client's kernel resets it (the
 *     client had closed). With none, the stream ends with no response at
 *     the socket's close. */
static __always_inline void defer_end_at_fin(const struct sock *sk, struct stream_state *st, __u64 now)
{
	__u32 sent = BPF_CORE_READ((const struct tcp_sock *)sk, write_seq);
	if (st->state == TW_ST_REQUEST && sent == st->req_seq)
		return;
	st->fin_ts = now;
	st->fin_seq = sent;
}

static __always_inline int on_state(const struct sock *sk, int newstate)
{
	/* No port test here: on the way to TIME_WAIT the socket can lose its
	 * port before it reaches CLOSE. State changes are rare; the hash
	 * lookup is affordable. */
	if (newstate != TCP_CLOSE && newstate != TCP_CLOSE_WAIT && newstate != TCP_FIN_WAIT1)
		return 0;
	struct stream_state *st = state_of(sk);
	if (!st)
		return 0;
	int moved = st->tls & TLS_MOVED;
	if (moved && !(st = moved_state(sk))) {
		if (newstate == TCP_CLOSE)
			forget(sk, 1);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	if (st->client)
		return client_state(sk, st, newstate, now, moved);
	if (newstate == TCP_CLOSE_WAIT) {
		if (!st->tls && st->state != TW_ST_IDLE) {
			defer_end_at_fin(sk, st, now);
			return 0;
		}
		end_stream(sk, st, TW_END_CLIENT_CLOSED, now);
		return 0;
	}
	if (newstate == TCP_FIN_WAIT1) {
		end_stream(sk, st, TW_END_CLOSE, now);
		return 0;
	}
	if (st->fin_ts) /* no write reported after the FIN */
		end_stream(sk, st, TW_END_CLIENT_CLOSED, st->fin_ts);
	int err = BPF_CORE_READ(sk, sk_err);
	end_stream(sk, st, err == ECONNRESET || err == EPIPE ? TW_END_RESET : TW_END_CLOSE, now);
	forget(sk, moved);
	return 0;
}

/* ---- entry points, one per hook type ----
 * Names stay within the kernel's 15 characters: tw_st_<event>_<type>. */

/* ready: sock:sk_data_ready, or the function that fires it for TCP. */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(tw_st_ready_btf, const struct sock *sk)
{
	return on_data_ready(sk, 1);
}

SEC("raw_tracepoint/sk_data_ready")
int tw_st_ready_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_data_ready((const struct sock *)ctx->args[0], 0);
}

SEC("tracepoint/sock/sk_data_ready")
int tw_st_ready_tp(struct trace_event_raw_sk_data_ready *ctx)
{
	return on_data_ready((const struct sock *)ctx->skaddr, 0);
}

SEC("fentry/sock_def_readable")
int BPF_PROG(tw_st_ready_fe, struct sock *sk)
{
	return on_data_ready(sk, 1);
}

SEC("kprobe/sock_def_readable")
int BPF_KPROBE(tw_st_ready_kp, struct sock *sk)
{
	return on_data_ready(sk, 0);
}

/* recv: sock:sock_recv_length, or tcp_recvmsg's return. tcp_recvmsg took
 * 6 arguments before Linux 5.19, 5 until 6.17 and 4 since; one fexit
 * program per prototype, user space picks the one the kernel's BTF has. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(tw_st_recv_btf, struct sock *sk, int ret, int flags)
{
	return on_recv_length(sk, ret, flags, 1);
}

SEC("raw_tracepoint/sock_recv_length")
int tw_st_recv_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_recv_length((const struct sock *)ctx->args[0], (int)ctx->args[1], (int)ctx->args[2], 0);
}

SEC("tracepoint/sock/sock_recv_length")
int tw_st_recv_tp(struct trace_event_raw_sock_msg_length *ctx)
{
	return on_recv_length((const struct sock *)ctx->sk, ctx->ret, ctx->flags, 0);
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(tw_st_recv_fx4, struct sock *sk, struct msghdr *msg, size_t len, int flags, int ret)
{
	return on_recv_length(sk, ret, flags, 1);
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(tw_st_recv_fx5, struct sock *sk, struct msghdr *msg, size_t len, int flags, int *addr_len,
	     int ret)
{
	return on_recv_length(sk, ret, flags, 1);
}

SEC("fexit/tcp_recvmsg")
int BPF_PROG(tw_st_recv_fx6, struct sock *sk, struct msghdr *msg, size_t len, int nonblock, int flags,
	     int *addr_len, int ret)
{
	return on_recv_length(sk, ret, flags, 1);
}

/* kprobes: the entry remembers the socket and an argument for the
 * return, per thread. */
struct pending_call {
	__u64 sk;
	/* tcp_recvmsg's flags (below 2^32); tcp_sendmsg_locked's msghdr (a
	 * kernel address, above), whose iterator tells after the call where
	 * the write ended. A return whose entry stored nothing (a socket not
	 * watched) can find the other function's call, one whose return the
	 * kernel missed: the two tell it apart by this. */
	__u64 arg;
};

/* Calls of watched sockets between a kprobe and its kretprobe. A thread
 * has at most one at a time; LRU so that returns the kernel missed
 * (kretprobe instances are limited) leave nothing behind for long. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pending_call);
} tw_st_calls SEC(".maps");

/* Set by user space: tcp_recvmsg's flags are its 5th argument (Linux
 * before 5.19, which also passed nonblock), else its 4th. */
const volatile __u8 recvmsg_flags_arg5 = 0;

static __always_inline int call_entry(const struct sock *sk, __u64 arg)
{
	if (!watched_sock(sk, 0) && !client_port(sk, 0))
		return 0;
	__u64 tid = bpf_get_current_pid_tgid();
	struct pending_call c = {.sk = (__u64)sk, .arg = arg};
	bpf_map_update_elem(&tw_st_calls, &tid, &c, BPF_ANY);
	return 0;
}

static __always_inline int call_return(struct pending_call *out)
{
	__u64 tid = bpf_get_current_pid_tgid();
	struct pending_call *c = bpf_map_lookup_elem(&tw_st_calls, &tid);
	if (!c)
		return -1;
	*out = *c;
	bpf_map_delete_elem(&tw_st_calls, &tid);
	return 0;
}

SEC("kprobe/tcp_recvmsg")
int BPF_KPROBE(tw_st_recv_kp, struct sock *sk)
{
	/* Both loads at fixed offsets: a pointer chosen at run time into the
	 * context is not allowed. */
	__u64 arg4 = PT_REGS_PARM4(ctx), arg5 = PT_REGS_PARM5(ctx);
	barrier_var(arg4);
	barrier_var(arg5);
	return call_entry(sk, (__u32)(recvmsg_flags_arg5 ? arg5 : arg4));
}

SEC("kretprobe/tcp_recvmsg")
int BPF_KRETPROBE(tw_st_recv_krp, int ret)
{
	struct pending_call c;
	if (call_return(&c))
		return 0;
	if (c.arg >> 32)
		return 0;
	return on_recv_length((const struct sock *)c.sk, ret, (int)c.arg, 0);
}

/* sent: sock:sock_send_length, or tcp_sendmsg_locked's return. The
 * latter runs under the socket lock, so a FIN or the next request that
 * arrives meanwhile is processed after the write is accounted, unless
 * the write waited for buffer space, which releases the lock; the
 * tracepoint fires after the lock is released. Either way a write may be
 * reported after the FIN (on_state) or the next request (on_data_ready)
 * that followed it, and user space drops the second END record when two
 * race. */
SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_st_sent_btf, struct sock *sk, int ret)
{
	return on_send_length(sk, ret, 1, NULL);
}

SEC("raw_tracepoint/sock_send_length")
int tw_st_sent_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_send_length((const struct sock *)ctx->args[0], (int)ctx->args[1], 0, NULL);
}

SEC("tracepoint/sock/sock_send_length")
int tw_st_sent_tp(struct trace_event_raw_sock_msg_length *ctx)
{
	return on_send_length((const struct sock *)ctx->sk, ctx->ret, 0, NULL);
}

SEC("fexit/tcp_sendmsg_locked")
int BPF_PROG(tw_st_sent_fx, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	return on_send_length(sk, ret, 1, &msg->msg_iter);
}

SEC("kprobe/tcp_sendmsg_locked")
int BPF_KPROBE(tw_st_sent_kp, struct sock *sk, struct msghdr *msg)
{
	return call_entry(sk, (__u64)msg);
}

SEC("kretprobe/tcp_sendmsg_locked")
int BPF_KRETPROBE(tw_st_sent_krp, int ret)
{
	struct pending_call c;
	if (call_return(&c))
		return 0;
	if (!(c.arg >> 32))
		return 0;
	return on_send_length((const struct sock *)c.sk, ret, 0, &((const struct msghdr *)c.arg)->msg_iter);
}

/* frag_va_base's calibration (stream_frag.h): a large kmalloc takes its
 * pages from the page allocator and returns their direct-map address.
 * Attached for the moment of one such allocation at start. Raw: 6.12's
 * verifier refuses a typed program kmalloc's void pointer. */
SEC("raw_tracepoint/mm_page_alloc")
int tw_st_frag_page(struct bpf_raw_tracepoint_args *ctx)
{
	return frag_page_alloc(ctx->args[0], ctx->args[1]);
}

SEC("raw_tracepoint/kmalloc")
int tw_st_frag_kmalloc(struct bpf_raw_tracepoint_args *ctx)
{
	return frag_kmalloc(ctx->args[1], ctx->args[3]);
}

/* state: sock:inet_sock_set_state, or tcp_set_state (which fires it for
 * every transition streams care about), before the change. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tw_st_state_btf, const struct sock *sk, int oldstate, int newstate)
{
	return on_state(sk, newstate);
}

SEC("raw_tracepoint/inet_sock_set_state")
int tw_st_state_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_state((const struct sock *)ctx->args[0], (int)ctx->args[2]);
}

SEC("tracepoint/sock/inet_sock_set_state")
int tw_st_state_tp(struct trace_event_raw_inet_sock_set_state *ctx)
{
	return on_state((const struct sock *)ctx->skaddr, ctx->newstate);
}

SEC("fentry/tcp_set_state")
int BPF_PROG(tw_st_state_fe, struct sock *sk, int state)
{
	return on_state(sk, state);
}

SEC("kprobe/tcp_set_state")
int BPF_KPROBE(tw_st_state_kp, struct sock *sk, int state)
{
	return on_state(sk, state);
}
