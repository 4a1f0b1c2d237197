/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Helpers every tokenwire program shares: address families, reads that
 * work behind any hook type, per-CPU counters and connection endpoints.
 * Include after vmlinux.h, the libbpf headers and tokenwire.h. */
#ifndef TOKENWIRE_COMMON_H
#define TOKENWIRE_COMMON_H

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6

/* RD reads ptr->field directly when ptr is a BTF-typed argument (fentry,
 * fexit, tp_btf: one load, fault-guarded by the JIT) and through
 * bpf_probe_read_kernel otherwise (raw and classic tracepoints, kprobes).
 * typed is a constant in every caller, so after inlining the compiler
 * keeps one branch and the verifier never sees the other. */
#define RD(typed, ptr, field) ((typed) ? (ptr)->field : BPF_CORE_READ(ptr, field))

/* count adds one to slot idx of a per-CPU array of __u64 counters: no
 * atomics, since each CPU has its own slot. */
static __always_inline void count(void *counters, __u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(counters, &idx);
	if (v)
		*v += 1;
}

/* fill_endpoints copies a socket's addresses and ports. A socket gives
 * its port back as it closes (skc_num goes to 0) before the records its
 * close writes; inet_sport keeps it. */
static __always_inline void fill_endpoints(struct tw_endpoints *e, const struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->family = family;
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (!e->sport)
		e->sport = bpf_ntohs(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
	e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->_pad = 0;
	if (family == AF_INET) {
		bpf_core_read(e->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(e->daddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(e->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
}

#endif
