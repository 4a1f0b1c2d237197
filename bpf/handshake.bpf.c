//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* TCP handshake latency, client and server role.
 *
 * Everything hangs off one event: a TCP socket changing state. The same
 * handler runs behind five hook types; user space loads the first one the
 * running kernel accepts (fentry, tp_btf, raw tracepoint, classic
 * tracepoint, kprobe), so only one of them is ever attached.
 *
 * Client role: CLOSE -> SYN_SENT stores the connect() time in an LRU map
 * keyed by the socket; SYN_SENT -> ESTABLISHED emits the duration and
 * SYN_SENT -> anything else emits a failure with the socket error. Either
 * way the entry is deleted, so sockets that never complete leave nothing.
 *
 * Server role: the kernel creates the child socket only when the final ACK
 * arrives, so the SYN's arrival is not visible here. But the kernel has
 * already timed the SYN-ACK: tcp_check_req() feeds now - snt_synack into
 * the child's RTT estimator (first sample: srtt_us = rtt << 3) before the
 * child turns ESTABLISHED, and when the SYN-ACK had to be retransmitted it
 * records total_rto_time (ms since the first SYN-ACK) instead. Server role
 * therefore needs no per-socket state at all.
 */
#include "vmlinux.h"
#include "bpf_helpers.h"
#include "bpf_core_read.h"
#include "bpf_tracing.h"
#include "bpf_endian.h"
#include "tokenwire.h"
#include "common.h"
#include "ringbuf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set from config before load. In .rodata, so with the filter off the
 * verifier removes the port lookup entirely. */
const volatile __u8 filter_ports = 0;

/* Ports to watch when filter_ports is set: index = port, value != 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} tw_hs_ports SEC(".maps");

struct syn_state {
	__u64 start_ns;
	__u32 pid;
	__u32 _pad;
};

/* Client sockets between connect() and the end of their handshake.
 * max_entries is set from config; LRU so a flood of unanswered SYNs can
 * never fill it for good. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct syn_state);
} tw_hs_syn_sent SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} tw_hs_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TW_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} tw_hs_counters SEC(".maps");

/* Make the shared types visible in BTF for bpf2go -type. */
const struct handshake_event *unused_handshake_event __attribute__((unused));
const enum tw_counter *unused_tw_counter __attribute__((unused));
const enum tw_role *unused_tw_role __attribute__((unused));
const enum tw_handshake_flag *unused_tw_handshake_flag __attribute__((unused));

static __always_inline int port_watched(__u16 port)
{
	if (!filter_ports)
		return 1;
	__u32 key = port;
	__u8 *v = bpf_map_lookup_elem(&tw_hs_ports, &key);
	return v && *v;
}

static __always_inline struct handshake_event *reserve(void)
{
	struct handshake_event *e = bpf_ringbuf_reserve(&tw_hs_events, sizeof(*e), 0);
	if (!e) {
		count(&tw_hs_counters, TW_COUNTER_RINGBUF_LOST);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	return e;
}

static __always_inline void client_done(const struct sock *sk, int newstate, __u64 now)
{
	__u64 key = (__u64)sk;
	struct syn_state *st = bpf_map_lookup_elem(&tw_hs_syn_sent, &key);
	if (!st) {
		/* Connected before we attached, or evicted from the LRU. */
		count(&tw_hs_counters, TW_COUNTER_HANDSHAKE_UNTRACKED);
		return;
	}
	struct handshake_event *e = reserve();
	if (e) {
		fill_endpoints(&e->ep, sk);
		e->role = TW_ROLE_CLIENT;
		e->pid = st->pid;
		e->retransmits = BPF_CORE_READ((const struct tcp_sock *)sk, total_retrans);
		if (newstate == TCP_ESTABLISHED) {
			e->duration_ns = now - st->start_ns;
		} else {
			e->flags = TW_HS_FAILED;
			e->errno_ = BPF_CORE_READ(sk, sk_err);
		}
		bpf_ringbuf_submit(e, submit_flags(&tw_hs_events));
	}
	bpf_map_delete_elem(&tw_hs_syn_sent, &key);
}

static __always_inline void server_done(const struct sock *sk, int newstate)
{
	if (!port_watched(BPF_CORE_READ(sk, __sk_common.skc_num)))
		return;
	struct handshake_event *e = reserve();
	if (!e)
		return;
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	fill_endpoints(&e->ep, sk);
	e->role = TW_ROLE_SERVER;
	e->retransmits = BPF_CORE_READ(tp, total_retrans);
	if (newstate != TCP_ESTABLISHED) {
		e->flags = TW_HS_FAILED;
		e->errno_ = BPF_CORE_READ(sk, sk_err);
	} else {
		__u32 rto_ms = 0;
		if (bpf_core_field_exists(tp->total_rto) && BPF_CORE_READ(tp, total_rto))
			rto_ms = BPF_CORE_READ(tp, total_rto_time);
		if (rto_ms) {
			e->flags = TW_HS_SYNACK_RETRANSMITTED;
			e->duration_ns = (__u64)rto_ms * 1000000;
		} else {
			__u32 srtt = BPF_CORE_READ(tp, srtt_us) >> 3;
			if (srtt)
				e->duration_ns = (__u64)srtt * 1000;
			else
				e->flags = TW_HS_NO_DURATION;
		}
	}
	bpf_ringbuf_submit(e, submit_flags(&tw_hs_events));
}

static __always_inline int on_state(const struct sock *sk, int oldstate, int newstate)
{
	/* Cheapest test first: most transitions are none of ours. */
	if (newstate != TCP_SYN_SENT && oldstate != TCP_SYN_SENT && oldstate != TCP_SYN_RECV)
		return 0;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;

	if (newstate == TCP_SYN_SENT) {
		if (!port_watched(bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport))))
			return 0;
		__u64 key = (__u64)sk;
		struct syn_state st = {
			.start_ns = bpf_ktime_get_ns(),
			.pid = bpf_get_current_pid_tgid() >> 32,
		};
		bpf_map_update_elem(&tw_hs_syn_sent, &key, &st, BPF_ANY);
		return 0;
	}
	if (oldstate == TCP_SYN_SENT) {
		client_done(sk, newstate, bpf_ktime_get_ns());
		return 0;
	}
	/* oldstate == SYN_RECV: a passive open's child socket. */
	if (newstate == TCP_ESTABLISHED || newstate == TCP_CLOSE)
		server_done(sk, newstate);
	return 0;
}

SEC("fentry/tcp_set_state")
int BPF_PROG(tw_hs_fentry, struct sock *sk, int state)
{
	return on_state(sk, BPF_CORE_READ(sk, __sk_common.skc_state), state);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tw_hs_btf, const struct sock *sk, int oldstate, int newstate)
{
	return on_state(sk, oldstate, newstate);
}

SEC("raw_tracepoint/inet_sock_set_state")
int tw_hs_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return on_state((const struct sock *)ctx->args[0], (int)ctx->args[1], (int)ctx->args[2]);
}

SEC("tracepoint/sock/inet_sock_set_state")
int tw_hs_tp(struct trace_event_raw_inet_sock_set_state *ctx)
{
	return on_state((const struct sock *)ctx->skaddr, ctx->oldstate, ctx->newstate);
}

SEC("kprobe/tcp_set_state")
int BPF_KPROBE(tw_hs_kprobe, struct sock *sk, int state)
{
	return on_state(sk, BPF_CORE_READ(sk, __sk_common.skc_state), state);
}
