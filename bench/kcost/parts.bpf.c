//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The write program's parts, rebuilt step by step: each program does one
 * step more of what the stream probe does on sock_send_length for a body
 * write. make bench attaches one of them at a time, alone on the hook, in
 * rounds of its own (a program that ran first would take the cold cache
 * misses of all of them): the differences between neighbours, with the
 * empty program of floor.bpf.c below the first, are what each step costs.
 * Never loaded by the receiver.
 *
 *   tw_pt_0_sk      the socket's port against a constant (a load from the
 *                   socket and nothing else)
 *   tw_pt_0a_port   the socket's port against the watched one, a .rodata
 *                   global: run as the JIT leaves it (a load from the
 *                   map), and inlined as the receiver loads its programs
 *   tw_pt_0b_slot   + the connection's slot in 8192 (the receiver's
 *                   tw_st_slots, Linux 5.12+: stream_state.h's slot_of)
 *   tw_pt_0b_store  or, instead of the slot, the socket's local storage
 *                   (made on its first write): the receiver's for a
 *                   connection whose two slots others hold, and on 5.11
 *   tw_pt_0b_hash   or a hash map keyed by the socket's address (the
 *                   receiver's for hook types without socket storage)
 *   tw_pt_0b_small  or 64 slots: small enough for the kernel to kmalloc
 *                   them (its direct map) where it vmallocs 8192, like the
 *                   receiver's front slots (tw_st_front, front_slot_of);
 *                   more connections share a slot and take it over
 *   tw_pt_0b_nested or as many slots as the receiver's, in 128 arrays of 64
 *                   (an array of maps), each kmalloc'ed
 *   tw_pt_0b_hot    or one value read by every write of every connection:
 *                   a line that stays in cache, the least any lookup costs
 *   tw_pt_0c_clock  + a clock read
 *   tw_pt_1_state   + two updates of the state
 *   tw_pt_1_store   or the clock read and the same two updates in local
 *                   storage
 *   tw_pt_2_args    + the syscall's arguments (its saved registers),
 *                   found as the receiver finds them on this kernel, or
 *                   by bpf_task_pt_regs as 5.15 to 6.1 do (syscall_io.h)
 *   tw_pt_3_tail    + the write's last 16 bytes read from user memory
 *   tw_pt_3_copy    or, on top of tw_pt_1_state, the same 16 bytes read
 *                   from the kernel's copy of them (stream_frag.h), as
 *                   the receiver reads them on Linux 6.2+
 *
 * What the real program does beyond tw_pt_3_tail or tw_pt_3_copy is classification and
 * accounting (stream_peek.h, stream_write.h). */
#include "vmlinux.h"
#include "bpf_helpers.h"
#include "bpf_core_read.h"
#include "bpf_tracing.h"
#include "syscall_io.h"
#include "stream_frag.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The load's server port, set before load. */
const volatile __u16 port = 0;

struct part_state {
	__u64 last_ns;
	__u64 writes;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct part_state);
} tw_pt_sk SEC(".maps");

/* The same state in a hash map keyed by the socket's address: what the
 * receiver's fallback for hooks without socket storage looks up. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct part_state);
} tw_pt_socks SEC(".maps");

/* The same state in slots like tw_st_slots': picked by the connection's
 * hash, owned by one socket at a time, 256 bytes each as the receiver's
 * (an owner, then the state, whose first line is what a write touches). */
#define PART_SLOTS 8192
struct part_slot {
	__u64 owner;
	struct part_state st;
	__u8 pad[256 - 8 - sizeof(struct part_state)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PART_SLOTS);
	__type(key, __u32);
	__type(value, struct part_slot);
} tw_pt_slots SEC(".maps");

/* The same slots, few enough (16 KiB) that the kernel allocates the array
 * with kmalloc, in its direct map, rather than with vmalloc: what the
 * slots' pages cost where the TLB is flushed at every system call. The
 * nested slots' arrays below have the same type. */
#define PART_SMALL_SLOTS 64
struct part_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PART_SMALL_SLOTS);
	__type(key, __u32);
	__type(value, struct part_slot);
};
struct part_inner tw_pt_small SEC(".maps");

/* The receiver's number of slots in arrays of the small ones' size, each
 * in the direct map: the outer array picks one by the hash's high bits. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, PART_SLOTS / PART_SMALL_SLOTS);
	__type(key, __u32);
	__array(values, struct part_inner);
} tw_pt_nested SEC(".maps");

/* One slot that every write reads and none writes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct part_slot);
} tw_pt_hot SEC(".maps");

static __always_inline int watched(const struct sock *sk)
{
	return sk->__sk_common.skc_num == port;
}

/* store records a write in the socket's local storage. */
static __always_inline int store(struct sock *sk)
{
	struct part_state *st = bpf_sk_storage_get(&tw_pt_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!st)
		return -1;
	st->last_ns = bpf_ktime_get_ns();
	st->writes++;
	return 0;
}

/* take makes s the slot of sk, taking it over from whichever held it. */
static __always_inline void take(struct part_slot *s, const struct sock *sk)
{
	if (s->owner != (__u64)sk) {
		s->owner = (__u64)sk;
		s->st.last_ns = 0;
		s->st.writes = 0;
	}
}

/* slot finds the connection's slot as stream_state.h's slot_of does. The
 * receiver claims a free slot with a compare-and-swap once per connection
 * and frees it at the close, which no part sees: here a connection takes
 * its slot over from whichever held it before, so that the slots of
 * closed connections do not fill the map between rounds. */
static __always_inline struct part_slot *slot(const struct sock *sk)
{
	__u32 i = sk->__sk_common.skc_hash & (PART_SLOTS - 1);
	struct part_slot *s = bpf_map_lookup_elem(&tw_pt_slots, &i);
	if (!s)
		return NULL;
	take(s, sk);
	return s;
}

/* state records a write in the connection's slot. */
static __always_inline int state(const struct sock *sk)
{
	struct part_slot *s = slot(sk);
	if (!s)
		return -1;
	s->st.last_ns = bpf_ktime_get_ns();
	s->st.writes++;
	return 0;
}

/* tail reads the last 16 bytes of a write of ret bytes from its buffer
 * (write, sendto) or from its last buffer (writev, sendmsg). */
static __always_inline int tail(const struct syscall_args *a, int ret)
{
	char t[16];
	const char *end;
	if (a->nr == NR_WRITE || a->nr == NR_SENDTO) {
		end = (const char *)a->arg1 + ret;
	} else {
		struct user_io io;
		if (syscall_io_of(a, &io) || io.nr == 0)
			return -1;
		__u32 last = (io.nr - 1) & (MAX_IOV - 1);
		end = (const char *)io.iov[last].iov_base + io.iov[last].iov_len;
	}
	return bpf_probe_read_user(t, sizeof(t), end - 16) ? -1 : t[15];
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0_sk, struct sock *sk, int ret)
{
	return ret > 0 && sk->__sk_common.skc_num == 1;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0a_port, struct sock *sk, int ret)
{
	return ret > 0 && watched(sk);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0b_store, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	return bpf_sk_storage_get(&tw_pt_sk, sk, 0, BPF_SK_STORAGE_GET_F_CREATE) != NULL;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0b_hash, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	__u64 key = (__u64)sk;
	struct part_state *st = bpf_map_lookup_elem(&tw_pt_socks, &key);
	if (!st) {
		struct part_state zero = {};
		bpf_map_update_elem(&tw_pt_socks, &key, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&tw_pt_socks, &key);
	}
	return st != NULL;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0b_slot, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	return slot(sk) != NULL;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0b_small, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	__u32 i = sk->__sk_common.skc_hash & (PART_SMALL_SLOTS - 1);
	struct part_slot *s = bpf_map_lookup_elem(&tw_pt_small, &i);
	if (!s)
		return 0;
	take(s, sk);
	return 1;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0b_nested, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	__u32 h = sk->__sk_common.skc_hash & (PART_SLOTS - 1);
	__u32 o = h / PART_SMALL_SLOTS, i = h & (PART_SMALL_SLOTS - 1);
	void *inner = bpf_map_lookup_elem(&tw_pt_nested, &o);
	if (!inner)
		return 0;
	struct part_slot *s = bpf_map_lookup_elem(inner, &i);
	if (!s)
		return 0;
	take(s, sk);
	return 1;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0b_hot, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	__u32 i = 0;
	struct part_slot *s = bpf_map_lookup_elem(&tw_pt_hot, &i);
	return s && s->owner == (__u64)sk;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_0c_clock, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	if (!slot(sk))
		return 0;
	return bpf_ktime_get_ns() & 1;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_1_state, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	return state(sk);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_1_store, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk))
		return 0;
	return store(sk);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_2_args, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk) || state(sk))
		return 0;
	struct syscall_args a;
	return syscall_args(&a) ? 0 : (int)a.nr;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_3_tail, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk) || state(sk))
		return 0;
	struct syscall_args a;
	if (syscall_args(&a))
		return 0;
	return tail(&a, ret);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_pt_3_copy, struct sock *sk, int ret)
{
	if (ret <= 0 || !watched(sk) || state(sk))
		return 0;
	__u64 room = 0;
	__u64 tail = sent_tail(sk, &room);
	if (!tail)
		return 0;
	char t[FRAG_TAIL];
	read_tail(t, tail);
	return t[15];
}
