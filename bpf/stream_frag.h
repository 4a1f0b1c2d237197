/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Streams: a TCP write's last bytes, read from the kernel's copy of them
 * rather than from the writer's memory. Part of stream.bpf.c.
 *
 * On the kernels this path runs on (6.2+; since 5.16 at the latest),
 * tcp_sendmsg puts no payload in an skb's head: every
 * byte a write hands it is copied into the socket's page fragment (the
 * writing task's, task->task_frag, unless the socket opted out), one
 * after the other, and the fragment's offset moves past each. When the
 * write's hook runs, its last byte sits just before that offset, in the
 * same page: a refill (a new page, or the same one from its start once
 * the network let go of it) happens before a copy, so whatever of this
 * write follows it is this write's alone. Two loads through
 * bpf_rdonly_cast read those bytes from the kernel's direct map, where
 * bpf_probe_read_user would cost a helper call and a user access.
 *
 * Only the writes the writer's memory would be read for are looked at
 * (write, writev, sendto, sendmsg: not io_uring's, whose zerocopy sends
 * copy nothing), and of those not the ones whose bytes are not copied
 * there: a socket with zerocopy on, or with an upper layer (kTLS: the
 * fragment ends with ciphertext).
 *
 * The page's direct-map address is frag_va_base + page * 64, with struct
 * page 64 bytes (sparse vmemmap): frag_va_base is page_offset_base - 64 *
 * vmemmap_base, which user space finds at start (the calibration below)
 * and leaves 0, which turns this path off, where it cannot.
 */
#ifndef TOKENWIRE_STREAM_FRAG_H
#define TOKENWIRE_STREAM_FRAG_H

const volatile __u64 frag_va_base = 0;

#define PAGE_STRUCT_SIZE 64
#define FRAG_TAIL 16

/* sent_tail returns the kernel address of the last FRAG_TAIL bytes of the
 * write the current task just made on sk, or 0 where they are not known
 * to be in its page fragment. sk is a BTF pointer. room gets the bytes of
 * the fragment's page up to the write's end: TCP copies a write into it
 * byte after byte, from offset 0 of a fresh page, so the write's last
 * min(its length, room) bytes end at the tail's end. */
static __always_inline __u64 sent_tail(const struct sock *sk, __u64 *room)
{
	struct task_struct *task = bpf_get_current_task_btf();
	const struct pt_regs *regs = stack_top_regs(task);
	if (!regs)
		return 0;
	long nr = regs->orig_ax;
	if (nr != NR_WRITE && nr != NR_WRITEV && nr != NR_SENDTO && nr != NR_SENDMSG)
		return 0;
	const struct inet_connection_sock *icsk =
		bpf_rdonly_cast(sk, bpf_core_type_id_kernel(struct inet_connection_sock));
	__u64 zerocopy = 1ULL << bpf_core_enum_value(enum sock_flags, SOCK_ZEROCOPY);
	/* Not copied there, or not as one write: zerocopy, kTLS (an ULP), and
	 * a socket in a sockmap (its psock in sk_user_data), whose writes
	 * tcp_bpf copies first and then hands TCP a piece at a time. */
	if (icsk->icsk_ulp_ops || (icsk->icsk_inet.sk.__sk_common.skc_flags & zerocopy) ||
	    icsk->icsk_inet.sk.sk_user_data)
		return 0;
	const void *frag = &task->task_frag;
	if (bpf_core_field_exists(sk->sk_use_task_frag) && !icsk->icsk_inet.sk.sk_use_task_frag)
		frag = &sk->sk_frag;
	/* Read as numbers (an array's bytes), not as the pointer the page
	 * is, so that the verifier lets it be scaled. */
	const __u8 *f = bpf_rdonly_cast(frag, bpf_core_type_id_kernel(struct in6_addr));
	__u64 page = *(const __u64 *)(f + bpf_core_field_offset(struct page_frag, page));
	__u64 end = *(const __u32 *)(f + bpf_core_field_offset(struct page_frag, offset));
	if (!page || end < FRAG_TAIL)
		return 0;
	*room = end;
	return frag_va_base + page * PAGE_STRUCT_SIZE + end - FRAG_TAIL;
}

/* read_tail copies the FRAG_TAIL bytes at a kernel address sent_tail
 * gave. The loads fault safely (the JIT's exception table): an address
 * that is not mapped yields zeros, never a crash. */
static __always_inline void read_tail(char t[FRAG_TAIL], __u64 addr)
{
	const __u64 *w = bpf_rdonly_cast((void *)addr, bpf_core_type_id_kernel(struct in6_addr));
	__u64 w0 = w[0], w1 = w[1];
	__builtin_memcpy(t, &w0, 8);
	__builtin_memcpy(t + 8, &w1, 8);
}

/* Calibration: user space makes the kernel kmalloc more than two pages
 * from one thread (frag_calib_tid) while the page allocator's and
 * kmalloc's tracepoints are traced. Such a kmalloc takes 2^order pages
 * from the page allocator (mm_page_alloc: their struct page) and returns
 * their direct-map address (kmalloc): the pair gives the base. Both
 * page_offset_base and vmemmap_base are 1 GiB aligned (PUD-aligned under
 * KASLR, fixed otherwise): a candidate that is not cannot be the base,
 * which rules out pairing the wrong allocations. */
const volatile __u32 frag_calib_tid = 0;

struct frag_calib {
	__u64 page;  /* the thread's last page allocation */
	__u64 order;
	__u64 base;  /* what was found */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct frag_calib);
} tw_st_frag_base SEC(".maps");

static __always_inline struct frag_calib *frag_calib(void)
{
	if ((__u32)bpf_get_current_pid_tgid() != frag_calib_tid)
		return NULL;
	__u32 zero = 0;
	return bpf_map_lookup_elem(&tw_st_frag_base, &zero);
}

static __always_inline int frag_page_alloc(__u64 page, __u64 order)
{
	struct frag_calib *c = frag_calib();
	if (c) {
		c->page = page;
		c->order = order;
	}
	return 0;
}

static __always_inline int frag_kmalloc(__u64 ptr, __u64 bytes_alloc)
{
	struct frag_calib *c = frag_calib();
	if (!c || !c->page || c->order > 10 || bytes_alloc != 4096ULL << c->order)
		return 0;
	__u64 base = ptr - c->page * PAGE_STRUCT_SIZE;
	if (!(base & ((1ULL << 30) - 1)))
		c->base = base;
	c->page = 0;
	return 0;
}

#endif
