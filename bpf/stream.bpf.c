//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Streams: time to first token, chunk intervals, bytes and duration of
 * streamed responses, per server socket.
 *
 * Four kernel events drive a small state machine per watched socket:
 *   sk_data_ready        request bytes reached the socket (softirq):
 *                        IDLE/RESPONSE -> REQUEST, request time = now
 *   sock_recv_length     the application read them: copy the request's head
 *                        from its buffer (method, path, headers, model)
 *   sock_send_length     a write finished with its byte count: the first one
 *                        starts the response (its head is sent to user
 *                        space), later ones are body chunks; its last bytes
 *                        show a terminator. The bytes come from the
 *                        writer's syscall buffers, so one hook per write.
 *   inet_sock_set_state  close, peer close or reset ends the stream
 * Where sock_send_length has no BTF-typed tracepoint, a fifth hook,
 * tcp_sendmsg_locked, peeks at each write before it is copied.
 *
 * Per-chunk work updates the socket's state in place (no upsert, no
 * record): the chunk-interval histogram lives in the state and reaches user
 * space in a PROGRESS record at most once per flush interval, and in the
 * END record. Ring-buffer traffic is per stream, not per chunk.
 */
#include "vmlinux.h"
#include "bpf_helpers.h"
#include "bpf_core_read.h"
#include "bpf_tracing.h"
#include "bpf_endian.h"
#include "tokenwire.h"
#include "ringbuf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define ECONNRESET 104
#define EPIPE 32

/* RD reads ptr->field directly when ptr is a BTF-typed argument (tp_btf:
 * one load, fault-guarded by the JIT) and through bpf_probe_read_kernel
 * otherwise. typed is a constant in every caller, so after inlining the
 * compiler keeps only one branch and the verifier never sees the other. */
#define RD(typed, ptr, field) ((typed) ? (ptr)->field : BPF_CORE_READ(ptr, field))

/* Configuration, set before load (.rodata: the verifier prunes by it). */
const volatile __u64 coalesce_ns = 500000;    /* writes closer than this are one chunk */
const volatile __u64 flush_ns = 1000000000;   /* PROGRESS at most this often per stream */
const volatile __u8 chunk_records = 0;        /* one CHUNK record per chunk (diagnostics) */
const volatile __u64 gap_bounds_ns[TW_GAP_BUCKETS - 1] = {};

/* Per-socket state. Fields a chunk touches come first, in one 64-byte
 * cache line: on a busy host that line is cold at every write, and each
 * further line is another miss on the write path. */
struct stream_state {
	/* hot: every write */
	__u64 last_chunk_ts;
	__u64 last_write_ts;
	__u64 last_flush_ts;
	__u64 bytes;
	__u64 gap_sum_ns;
	__u64 gap_max_ns;
	__u32 chunks;
	__u8 state;         /* enum tw_stream_state */
	__u8 in_write;      /* fallback peek: a write's peek ran, its byte count is pending */
	__u8 write_flags;   /* fallback peek: what it found */
	__u8 resp_flags;    /* enum tw_response_flag of this response */
	__u32 write_len;    /* fallback peek: bytes the pending write asked for */
	__u32 seq;
	/* per chunk, one bucket */
	__u32 gap_counts[TW_GAP_BUCKETS];
	/* per stream */
	__u64 req_ts;
	__u64 headers_ts;
	__u64 first_chunk_ts;
	__u32 pid;
	__u32 req_captured; /* request bytes read by the application so far */
	__u32 head_bytes;   /* http mode: bytes of the first write */
};

#define WRITE_TERMINATOR 1
#define WRITE_PEEKED 2

/* Server ports to watch. Up to MAX_RO_PORTS sit in .rodata, read on every
 * event with no map lookup and no extra cache miss; a longer list goes to
 * tw_st_ports (index = port, value != 0). */
#define MAX_RO_PORTS 16
const volatile __u16 watch_ports[MAX_RO_PORTS] = {};
const volatile __u8 n_watch_ports = 0;
const volatile __u8 ports_in_map = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} tw_st_ports SEC(".maps");

/* Per-socket stream state; max_entries from config. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stream_state);
} tw_st_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} tw_st_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TW_ST_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tw_st_counters SEC(".maps");

const struct stream_payload *unused_stream_payload __attribute__((unused));
const struct stream_stats *unused_stream_stats __attribute__((unused));
const enum tw_stream_record *unused_tw_stream_record __attribute__((unused));
const enum tw_end_reason *unused_tw_end_reason __attribute__((unused));
const enum tw_stream_counter *unused_tw_stream_counter __attribute__((unused));
const enum tw_response_flag *unused_tw_response_flag __attribute__((unused));
const enum tw_stream_state *unused_tw_stream_state __attribute__((unused));

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&tw_st_counters, &idx);
	if (v)
		*v += 1;
}

static __always_inline int port_watched(__u16 port)
{
	if (ports_in_map) {
		__u32 key = port;
		__u8 *v = bpf_map_lookup_elem(&tw_st_ports, &key);
		return v && *v;
	}
	for (int i = 0; i < MAX_RO_PORTS; i++) {
		if (i >= n_watch_ports)
			return 0;
		if (watch_ports[i] == port)
			return 1;
	}
	return 0;
}

/* watched_sock is the first test of every hook: one field load and one
 * array lookup turn away the sockets of every other port on the host
 * before the per-socket hash is touched. */
static __always_inline int watched_sock(const struct sock *sk, const int typed)
{
	return port_watched(RD(typed, sk, __sk_common.skc_num));
}

static __always_inline void fill_endpoints(struct stream_stats *r, const struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	r->family = family;
	r->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	r->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (family == AF_INET) {
		bpf_core_read(r->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(r->daddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(r->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(r->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
}

/* emit_stats sends a PROGRESS, END or CHUNK record from the state. */
static __always_inline void emit_stats(const struct sock *sk, struct stream_state *st, __u8 kind,
				       __u8 reason, __u64 now)
{
	struct stream_stats *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		count(TW_ST_COUNTER_RINGBUF_LOST);
		return;
	}
	r->id.sock = (__u64)sk;
	r->id.seq = st->seq;
	r->id.kind = kind;
	r->id.reason = reason;
	r->id.len = 0;
	r->req_ts = st->req_ts;
	r->headers_ts = st->headers_ts;
	r->first_chunk_ts = st->first_chunk_ts;
	r->last_chunk_ts = st->last_chunk_ts;
	r->end_ts = kind == TW_REC_END ? now : 0;
	r->bytes = st->bytes;
	r->gap_sum_ns = st->gap_sum_ns;
	r->gap_max_ns = st->gap_max_ns;
	r->chunks = st->chunks;
	r->pid = st->pid;
	r->head_bytes = st->head_bytes;
	r->_pad2 = 0;
	for (int i = 0; i < TW_GAP_BUCKETS; i++) {
		r->gap_counts[i] = st->gap_counts[i];
		st->gap_counts[i] = 0;
	}
	fill_endpoints(r, sk);
	bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
	st->last_flush_ts = now;
}

static __always_inline void end_stream(const struct sock *sk, struct stream_state *st, __u8 reason,
				       __u64 now)
{
	if (st->state == TW_ST_IDLE)
		return;
	if (st->state == TW_ST_REQUEST)
		reason = TW_END_NO_RESPONSE;
	emit_stats(sk, st, TW_REC_END, reason, now);
	st->state = TW_ST_IDLE;
}

/* ---- request side ---- */

/* The current task's read or write syscall names the user buffers it
 * moved data to or from: sock_recv_length and sock_send_length run inside
 * that syscall, after the copy, so its arguments (saved in its pt_regs)
 * give the data exactly once, whatever the skb layout (loopback and GRO put
 * payload in page frags that BPF cannot reach at arrival), and a write's
 * byte count is already known (partial writes of non-blocking sockets
 * included). Kernel threads and io_uring workers have no such syscall:
 * their data is not looked at. */
#define MAX_IOV 4 /* iovecs looked at per readv/writev/recvmsg/sendmsg */

struct user_io {
	struct iovec iov[MAX_IOV];
	__u32 nr;
};

#if defined(__TARGET_ARCH_x86)
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47
#define PF_IO_WORKER 0x00000010
#define PF_KTHREAD 0x00200000

/* syscall_io fills io from the current syscall's arguments. Only for
 * BTF-typed programs (bpf_get_current_task_btf). */
static __always_inline int syscall_io(struct user_io *io)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->flags & (PF_KTHREAD | PF_IO_WORKER))
		return -1;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return -1;
	long nr = regs->orig_ax;
	const void *arg = (const void *)regs->si;
	__u64 n = regs->dx;
	const struct iovec *iov;
	switch (nr) {
	case NR_READ:
	case NR_WRITE:
	case NR_RECVFROM:
	case NR_SENDTO:
		io->iov[0].iov_base = (void *)arg;
		io->iov[0].iov_len = n;
		io->nr = 1;
		return 0;
	case NR_READV:
	case NR_WRITEV:
		iov = arg;
		break;
	case NR_RECVMSG:
	case NR_SENDMSG: {
		struct user_msghdr m;
		if (bpf_probe_read_user(&m, sizeof(m), arg))
			return -1;
		iov = m.msg_iov;
		n = m.msg_iovlen;
		break;
	}
	default:
		return -1;
	}
	/* Constant sizes: the verifier needs a bounded length. */
	long err;
	switch (n) {
	case 0:
		return -1;
	case 1:
		err = bpf_probe_read_user(io->iov, 1 * sizeof(struct iovec), iov);
		break;
	case 2:
		err = bpf_probe_read_user(io->iov, 2 * sizeof(struct iovec), iov);
		break;
	case 3:
		err = bpf_probe_read_user(io->iov, 3 * sizeof(struct iovec), iov);
		break;
	default:
		n = MAX_IOV;
		err = bpf_probe_read_user(io->iov, MAX_IOV * sizeof(struct iovec), iov);
	}
	io->nr = n;
	return err ? -1 : 0;
}
#else
static __always_inline int syscall_io(struct user_io *io)
{
	return -1;
}
#endif

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
		count(TW_ST_COUNTER_RINGBUF_LOST);
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

static __always_inline int on_recv_length(const struct sock *sk, int ret, const int typed)
{
	if (ret <= 0 || !watched_sock(sk, typed))
		return 0;
	__u64 key = (__u64)sk;
	struct stream_state *st = bpf_map_lookup_elem(&tw_st_socks, &key);
	if (!st || st->state != TW_ST_REQUEST)
		return 0;
	capture_request(sk, st, ret);
	return 0;
}

static __always_inline int on_data_ready(const struct sock *sk, const int typed)
{
	if (!watched_sock(sk, typed) || RD(typed, sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	/* Only new bytes make a request (not a FIN or a pure ACK). tcp_sock
	 * fields go through probe reads: the typed argument is a struct sock. */
	if (BPF_CORE_READ(tp, rcv_nxt) == BPF_CORE_READ(tp, copied_seq))
		return 0;

	__u64 key = (__u64)sk;
	struct stream_state *st = bpf_map_lookup_elem(&tw_st_socks, &key);
	if (!st) {
		/* First bytes on this connection: the one insert per socket. */
		struct stream_state fresh = {};
		if (bpf_map_update_elem(&tw_st_socks, &key, &fresh, BPF_NOEXIST) != 0) {
			count(TW_ST_COUNTER_TRACK_FAILED);
		}
		st = bpf_map_lookup_elem(&tw_st_socks, &key);
		if (!st)
			return 0;
		count(TW_ST_COUNTER_NEW_SOCKETS);
	}
	__u64 now = bpf_ktime_get_ns();
	if (st->state != TW_ST_REQUEST) {
		end_stream(sk, st, TW_END_NEXT_REQUEST, now);
		st->state = TW_ST_REQUEST;
		st->seq++;
		st->headers_ts = 0;
		st->first_chunk_ts = 0;
		st->last_chunk_ts = 0;
		st->last_write_ts = 0;
		st->last_flush_ts = now;
		st->bytes = 0;
		st->gap_sum_ns = 0;
		st->gap_max_ns = 0;
		st->chunks = 0;
		st->req_captured = 0;
		st->head_bytes = 0;
		st->resp_flags = 0;
		for (int i = 0; i < TW_GAP_BUCKETS; i++)
			st->gap_counts[i] = 0;
	}
	st->req_ts = now; /* the last byte of the request wins */
	return 0;
}

/* ---- write side: what a write carried ---- */

/* write_buffer returns the user buffer a write starts with and its length,
 * from tcp_sendmsg_locked's msghdr (the fallback peek). */
static __always_inline int write_buffer(const struct msghdr *msg, const void **base, __u64 *len,
					const int typed)
{
	__u8 type = RD(typed, msg, msg_iter.iter_type);
	__u64 count = RD(typed, msg, msg_iter.count);
	__u64 off = RD(typed, msg, msg_iter.iov_offset);
	if (type == bpf_core_enum_value(enum iter_type, ITER_UBUF)) {
		*base = RD(typed, msg, msg_iter.ubuf) + off;
		*len = count;
		return 0;
	}
	if (type == bpf_core_enum_value(enum iter_type, ITER_IOVEC)) {
		const struct iovec *iov = RD(typed, msg, msg_iter.__iov);
		struct iovec first;
		if (bpf_probe_read_kernel(&first, sizeof(first), iov))
			return -1;
		*base = first.iov_base + off;
		*len = first.iov_len - off < count ? first.iov_len - off : count;
		return 0;
	}
	return -1;
}

/* last_bytes reads the final 8 bytes of a write (zero-padded in front when
 * the write is shorter), for the chunked-encoding terminator. */
static __always_inline int last_bytes(const struct msghdr *msg, __u8 out[8], const int typed)
{
	__u8 type = RD(typed, msg, msg_iter.iter_type);
	__u64 count = RD(typed, msg, msg_iter.count);
	const __u8 *end;
	if (type == bpf_core_enum_value(enum iter_type, ITER_UBUF)) {
		end = RD(typed, msg, msg_iter.ubuf) + RD(typed, msg, msg_iter.iov_offset) + count;
	} else if (type == bpf_core_enum_value(enum iter_type, ITER_IOVEC)) {
		const struct iovec *iov = RD(typed, msg, msg_iter.__iov);
		__u64 nr = RD(typed, msg, msg_iter.nr_segs);
		struct iovec last;
		if (nr == 0 || nr > 1024 || bpf_probe_read_kernel(&last, sizeof(last), iov + (nr - 1)))
			return -1;
		end = (const __u8 *)last.iov_base + last.iov_len;
		if (last.iov_len < 8)
			return -1; /* the terminator is split across iovecs: leave it */
	} else {
		return -1;
	}
	__builtin_memset(out, 0, 8);
	if (count >= 8)
		return bpf_probe_read_user(out, 8, end - 8);
	if (count == 5)
		return bpf_probe_read_user(out + 3, 5, end - 5);
	return -1;
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
		count(TW_ST_COUNTER_RINGBUF_LOST);
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
 * terminators for the others. */
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

/* on_sendmsg is the fallback peek, for kernels where sock_send_length has
 * no BTF-typed tracepoint: tcp_sendmsg_locked fires before the copy (once
 * per segment; the first wins) and leaves its findings in the state. It
 * cannot know how many bytes the write will take: on_send_length drops a
 * terminator seen at the end of a write that was only partly taken, and
 * the rest comes back as a new write, peeked again. */
static __always_inline int on_sendmsg(const struct sock *sk, const struct msghdr *msg, const int typed)
{
	if (!watched_sock(sk, typed))
		return 0;
	__u64 key = (__u64)sk;
	struct stream_state *st = bpf_map_lookup_elem(&tw_st_socks, &key);
	if (!st || st->in_write || st->state == TW_ST_IDLE)
		return 0; /* a continuation of this write, or no request pending */
	st->in_write = 1;
	st->write_flags = WRITE_PEEKED;
	st->write_len = RD(typed, msg, msg_iter.count);
	const void *base;
	__u64 len;
	if (st->state == TW_ST_REQUEST) {
		if (write_buffer(msg, &base, &len, typed) == 0)
			peek_response(sk, st, base, len, len);
		return 0;
	}
	__u8 tail[8];
	if (last_bytes(msg, tail, typed) == 0 && is_terminator(tail)) {
		st->write_flags |= WRITE_TERMINATOR;
		return 0;
	}
	if (write_buffer(msg, &base, &len, typed) == 0 && len >= 12 && len <= 32) {
		char b[32] = {};
		if (bpf_probe_read_user(b, len, base) == 0 && is_done_event(b, len))
			st->write_flags |= WRITE_TERMINATOR;
	}
	return 0;
}

/* ---- write side: accounting ---- */

/* gap_bucket returns the index of the first bound >= gap (16: none), by
 * binary search: 5 comparisons instead of up to 16. */
static __always_inline __u32 gap_bucket(__u64 gap)
{
	__u32 lo = 0;
	if (gap > gap_bounds_ns[7])
		lo = 8;
	if (gap > gap_bounds_ns[(lo + 3) & 15])
		lo += 4;
	if (gap > gap_bounds_ns[(lo + 1) & 15])
		lo += 2;
	if (gap > gap_bounds_ns[lo & 15])
		lo += 1;
	if (lo == 15 && gap > gap_bounds_ns[15])
		lo = 16; /* the overflow bucket */
	return lo;
}

static __always_inline void chunk(const struct sock *sk, struct stream_state *st, __u64 n, __u64 now)
{
	if (st->chunks && now - st->last_write_ts < coalesce_ns) {
		/* Part of the same burst (a chunk written in several writes). */
		st->bytes += n;
		st->last_write_ts = now;
		return;
	}
	if (st->chunks) {
		__u64 gap = now - st->last_chunk_ts;
		__u32 b = gap_bucket(gap);
		if (b < TW_GAP_BUCKETS)
			st->gap_counts[b]++;
		st->gap_sum_ns += gap;
		if (gap > st->gap_max_ns)
			st->gap_max_ns = gap;
	}
	st->chunks++;
	st->bytes += n;
	st->last_chunk_ts = now;
	st->last_write_ts = now;
	if (st->chunks == 1) {
		st->first_chunk_ts = now;
		/* TTFT reaches user space now, not at the end of a long stream. */
		emit_stats(sk, st, TW_REC_PROGRESS, 0, now);
		return;
	}
	if (chunk_records) {
		struct stream_stats *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
		if (r) {
			__builtin_memset(r, 0, sizeof(*r));
			r->id.sock = (__u64)sk;
			r->id.seq = st->seq;
			r->id.kind = TW_REC_CHUNK;
			r->last_chunk_ts = now;
			r->bytes = n;
			r->chunks = st->chunks;
			bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
		} else {
			count(TW_ST_COUNTER_RINGBUF_LOST);
		}
	}
	if (now - st->last_flush_ts >= flush_ns)
		emit_stats(sk, st, TW_REC_PROGRESS, 0, now);
}

/* on_send_length accounts a finished write. With peek (the BTF-typed
 * variant) it also looks at what the write carried; otherwise it uses what
 * the tcp_sendmsg_locked fallback found. */
static __always_inline int on_send_length(const struct sock *sk, int ret, const int typed, const int peek)
{
	if (!watched_sock(sk, typed))
		return 0;
	__u64 key = (__u64)sk;
	struct stream_state *st = bpf_map_lookup_elem(&tw_st_socks, &key);
	if (!st)
		return 0;
	__u8 flags = st->write_flags;
	st->in_write = 0;
	st->write_flags = 0;
	if (ret <= 0 || st->state == TW_ST_IDLE)
		return 0;
	if (peek)
		flags = peek_sent(sk, st, ret);
	else if ((__u32)ret < st->write_len)
		flags &= ~WRITE_TERMINATOR; /* partial: the tail the peek saw was not sent */
	__u64 now = bpf_ktime_get_ns();
	if (st->state == TW_ST_REQUEST) {
		st->state = TW_ST_RESPONSE;
		st->headers_ts = now;
		st->pid = bpf_get_current_pid_tgid() >> 32;
		if (!(flags & WRITE_PEEKED) || !(st->resp_flags & TW_RESP_HTTP)) {
			chunk(sk, st, ret, now); /* opaque: every write is a chunk */
			return 0;
		}
		/* http: the head write is not a chunk here; any body bytes it
		 * carried are credited in user space from head_bytes. */
		st->head_bytes = ret;
		return 0;
	}
	if (flags & WRITE_TERMINATOR) {
		st->bytes += ret;
		end_stream(sk, st, TW_END_TERMINATOR, now);
		return 0;
	}
	chunk(sk, st, ret, now);
	return 0;
}

/* ---- connection state ---- */

static __always_inline int on_state(const struct sock *sk, int oldstate, int newstate, const int typed)
{
	/* No port test here: on the way to TIME_WAIT the socket can lose its
	 * port before it reaches CLOSE. State changes are rare; the hash
	 * lookup is affordable. */
	if (newstate != TCP_CLOSE && newstate != TCP_CLOSE_WAIT && newstate != TCP_FIN_WAIT1)
		return 0;
	__u64 key = (__u64)sk;
	struct stream_state *st = bpf_map_lookup_elem(&tw_st_socks, &key);
	if (!st)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (newstate == TCP_CLOSE_WAIT) {
		end_stream(sk, st, TW_END_CLIENT_CLOSED, now);
		return 0;
	}
	if (newstate == TCP_FIN_WAIT1) {
		end_stream(sk, st, TW_END_CLOSE, now);
		return 0;
	}
	int err = BPF_CORE_READ(sk, sk_err);
	end_stream(sk, st, err == ECONNRESET || err == EPIPE ? TW_END_RESET : TW_END_CLOSE, now);
	bpf_map_delete_elem(&tw_st_socks, &key);
	return 0;
}

/* ---- entry points, one per hook type ---- */

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

/* Only the BTF-typed variant can name the reader's buffer (it needs
 * bpf_get_current_task_btf); without it streams carry no request details. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(tw_st_recv_btf, struct sock *sk, int ret)
{
	return on_recv_length(sk, ret, 1);
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(tw_st_peek_btf, const struct sock *sk, const struct msghdr *msg)
{
	return on_sendmsg(sk, msg, 1);
}

SEC("raw_tracepoint/tcp_sendmsg_locked")
int tw_st_peek_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_sendmsg((const struct sock *)ctx->args[0], (const struct msghdr *)ctx->args[1], 0);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_st_sent_btf, struct sock *sk, int ret)
{
	return on_send_length(sk, ret, 1, 1);
}

SEC("raw_tracepoint/sock_send_length")
int tw_st_sent_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_send_length((const struct sock *)ctx->args[0], (int)ctx->args[1], 0, 0);
}

SEC("tracepoint/sock/sock_send_length")
int tw_st_sent_tp(struct trace_event_raw_sock_msg_length *ctx)
{
	return on_send_length((const struct sock *)ctx->sk, ctx->ret, 0, 0);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tw_st_state_btf, const struct sock *sk, int oldstate, int newstate)
{
	return on_state(sk, oldstate, newstate, 1);
}

SEC("raw_tracepoint/inet_sock_set_state")
int tw_st_state_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_state((const struct sock *)ctx->args[0], (int)ctx->args[1], (int)ctx->args[2], 0);
}

SEC("tracepoint/sock/inet_sock_set_state")
int tw_st_state_tp(struct trace_event_raw_inet_sock_set_state *ctx)
{
	return on_state((const struct sock *)ctx->skaddr, ctx->oldstate, ctx->newstate, 0);
}
