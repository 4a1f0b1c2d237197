/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The user buffers of the read or write system call the current task is
 * in.
 *
 * The socket hooks run inside that syscall, after the copy: its arguments,
 * saved in the task's pt_regs at kernel entry, name the buffers the data
 * came from or went to, whatever the hook type and whatever the skb layout
 * (loopback and GRO put payload in page frags that BPF cannot reach at
 * arrival). Kernel threads and io_uring workers have no such syscall:
 * their data is not looked at.
 *
 * The syscall numbers and the pt_regs layout are x86-64's; the build is
 * for x86-64 only (see bpf/arch.go).
 */
#ifndef TOKENWIRE_SYSCALL_IO_H
#define TOKENWIRE_SYSCALL_IO_H

#ifndef __TARGET_ARCH_x86
#error "syscall_io.h reads x86-64 syscall frames: build with -target amd64"
#endif

#define MAX_IOV 4 /* iovecs copied per readv/writev/recvmsg/sendmsg */

/* user_io: the first nr buffers of a syscall, copied (or, after
 * io_window, the last MAX_IOV of a write's). */
struct user_io {
	struct iovec iov[MAX_IOV];
	__u32 nr;
};

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
#define USER_CS 0x33 /* __USER_CS: the frame of a 64-bit process's syscall */

/* How to find the syscall's registers, set by user space before load:
 * regs_from_btf when the kernel has bpf_task_pt_regs (5.15+); otherwise
 * they sit at the top of the task's kernel stack, stack_regs_offset bytes
 * above task->stack (THREAD_SIZE minus the frame; x86-64 has no padding
 * above it before FRED, which needs 6.9). The code segment in the frame
 * proves the guess: a wrong offset yields no data, never wrong data.
 * regs_by_cast, where the kernel also has bpf_rdonly_cast (6.2+), takes
 * the frame at that offset with loads alone: every write then saves the
 * call to bpf_task_pt_regs, which stays the answer when the frame there
 * is not a user one (a kernel with a larger stack or padding, a 32-bit
 * process). */
const volatile __u8 regs_from_btf = 1;
const volatile __u8 regs_by_cast = 0;
const volatile __u32 stack_regs_offset = 16384 - sizeof(struct pt_regs);

/* A kfunc the verifier turns into a register move: the loads through its
 * result are the JIT's fault-tolerant loads. Weak: where the kernel lacks
 * it, the loader poisons the call, which regs_by_cast = 0 leaves
 * unreached. */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;

/* stack_top_regs returns the registers a 64-bit process's task entered
 * its syscall with, read at the top of its kernel stack with loads alone
 * (regs_by_cast only), or NULL when the frame there is not such a one. */
static __always_inline const struct pt_regs *stack_top_regs(struct task_struct *task)
{
	const struct pt_regs *regs =
		bpf_rdonly_cast(task->stack + stack_regs_offset, bpf_core_type_id_kernel(struct pt_regs));
	return regs->cs == USER_CS ? regs : NULL;
}

/* task_regs returns the registers task entered the kernel with, or NULL. */
static __always_inline const struct pt_regs *task_regs(struct task_struct *task)
{
	if (regs_by_cast) {
		const struct pt_regs *regs = stack_top_regs(task);
		if (regs)
			return regs;
	}
	return (const struct pt_regs *)bpf_task_pt_regs(task);
}

struct syscall_args {
	long nr;
	__u64 arg1; /* rsi: the buffer, iovec array or msghdr */
	__u64 arg2; /* rdx: the length or iovec count */
};

static __always_inline int syscall_args(struct syscall_args *a)
{
	if (regs_from_btf) {
		struct task_struct *task = bpf_get_current_task_btf();
		if (task->flags & (PF_KTHREAD | PF_IO_WORKER))
			return -1;
		const struct pt_regs *regs = task_regs(task);
		if (!regs)
			return -1;
		a->nr = regs->orig_ax;
		a->arg1 = regs->si;
		a->arg2 = regs->dx;
		return 0;
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	if (BPF_CORE_READ(task, flags) & (PF_KTHREAD | PF_IO_WORKER))
		return -1;
	const void *stack = BPF_CORE_READ(task, stack);
	/* Only dx to cs: the copy lands in the frame of whatever inlines
	 * this. */
	struct {
		__u64 dx, si, di, orig_ax, ip, cs;
	} regs;
	_Static_assert(offsetof(struct pt_regs, si) - offsetof(struct pt_regs, dx) == 1 * sizeof(__u64) &&
			       offsetof(struct pt_regs, orig_ax) - offsetof(struct pt_regs, dx) == 3 * sizeof(__u64) &&
			       offsetof(struct pt_regs, cs) - offsetof(struct pt_regs, dx) == 5 * sizeof(__u64),
		       "x86-64 pt_regs: dx, si, di, orig_ax, ip, cs");
	const void *frame = stack + stack_regs_offset + offsetof(struct pt_regs, dx);
	if (!stack || bpf_probe_read_kernel(&regs, sizeof(regs), frame))
		return -1;
	if (regs.cs != USER_CS)
		return -1;
	a->nr = regs.orig_ax;
	a->arg1 = regs.si;
	a->arg2 = regs.dx;
	return 0;
}

/* user_r14 returns R14 as the current task entered its syscall: in Go
 * code (the register ABI) the running goroutine, g; 0 when unknown. */
static __always_inline __u64 user_r14(void)
{
	if (regs_from_btf) {
		const struct pt_regs *regs = task_regs(bpf_get_current_task_btf());
		return regs ? regs->r14 : 0;
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	const void *regs = BPF_CORE_READ(task, stack);
	__u64 cs = 0, r14 = 0;
	if (!regs)
		return 0;
	regs += stack_regs_offset;
	if (bpf_probe_read_kernel(&cs, sizeof(cs), regs + offsetof(struct pt_regs, cs)) || cs != USER_CS ||
	    bpf_probe_read_kernel(&r14, sizeof(r14), regs + offsetof(struct pt_regs, r14)))
		return 0;
	return r14;
}

/* syscall_io fills io from the current syscall's arguments. */
static __always_inline int syscall_io_of(const struct syscall_args *a, struct user_io *io);

static __always_inline int syscall_io(struct user_io *io)
{
	struct syscall_args a;
	if (syscall_args(&a))
		return -1;
	return syscall_io_of(&a, io);
}

/* syscall_iov sets *vec to the iovec array of a vectored syscall (readv,
 * writev, recvmsg, sendmsg) from its arguments a: its address as base,
 * its count as len. The callers pass a slot of their user_io: every byte
 * of stack counts, as the programs' call chains come near the verifier's
 * 512. */
_Static_assert(offsetof(struct user_msghdr, msg_iovlen) == offsetof(struct user_msghdr, msg_iov) + 8 &&
		       sizeof(struct iovec) == 16,
	       "syscall_iov reads msg_iov and msg_iovlen as one iovec");

static __always_inline int syscall_iov(const struct syscall_args *a, struct iovec *vec)
{
	switch (a->nr) {
	case NR_READV:
	case NR_WRITEV:
		vec->iov_base = (void *)a->arg1;
		vec->iov_len = a->arg2;
		return 0;
	case NR_RECVMSG:
	case NR_SENDMSG:
		return bpf_probe_read_user(vec, sizeof(*vec), (const char *)a->arg1 + offsetof(struct user_msghdr, msg_iov))
			       ? -1
			       : 0;
	}
	return -1;
}

/* syscall_io_of fills io from the syscall arguments a. */
static __always_inline int syscall_io_of(const struct syscall_args *a, struct user_io *io)
{
	switch (a->nr) {
	case NR_READ:
	case NR_WRITE:
	case NR_RECVFROM:
	case NR_SENDTO:
		io->iov[0].iov_base = (void *)a->arg1;
		io->iov[0].iov_len = a->arg2;
		io->nr = 1;
		return 0;
	}
	if (syscall_iov(a, &io->iov[0]))
		return -1;
	const struct iovec *iov = io->iov[0].iov_base;
	__u64 n = io->iov[0].iov_len;
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

/* The iterator's fields as kernels before 6.4 name its iovec array, and
 * before 5.14 its type (with the direction in bit 0). */
struct iov_iter___old {
	unsigned int type;
	const struct iovec *iov;
} __attribute__((preserve_access_index));

/* iter_window is io_window from the write's iterator (it: msg_iter of the
 * msghdr tcp_sendmsg_locked was handed), after the call: the iterator has
 * moved past the buffers the write took whole, to the kernel's copy of
 * the next iovec, and iov_offset says how much of that one went. The last
 * MAX_IOV buffers the write took end there, however many it has, and
 * none is before the array: io_window calls this only when the first
 * MAX_IOV hold fewer than ret bytes. */
static __always_inline long iter_window(struct user_io *io, __u64 ret, const struct iov_iter *it)
{
	__u32 type;
	const struct iovec *next;
	if (bpf_core_field_exists(it->iter_type)) {
		type = BPF_CORE_READ(it, iter_type);
		next = bpf_core_field_exists(it->__iov) ? BPF_CORE_READ(it, __iov)
							: BPF_CORE_READ((const struct iov_iter___old *)it, iov);
	} else {
		type = BPF_CORE_READ((const struct iov_iter___old *)it, type) & ~1u;
		next = BPF_CORE_READ((const struct iov_iter___old *)it, iov);
	}
	if (type != bpf_core_enum_value(enum iter_type, ITER_IOVEC))
		return -1;
	__u64 part = BPF_CORE_READ(it, iov_offset);
	if (bpf_probe_read_kernel(io->iov, sizeof(io->iov), next - (part ? MAX_IOV - 1 : MAX_IOV)))
		return -1;
	if (part)
		io->iov[MAX_IOV - 1].iov_len = part;
	io->nr = MAX_IOV;
	__u64 window = io->iov[0].iov_len + io->iov[1].iov_len + io->iov[2].iov_len + io->iov[3].iov_len;
	return window > ret ? -1 : (long)(ret - window);
}

/* io_window makes io's copied buffers the last MAX_IOV of a gathered
 * write of ret bytes, when the first ones hold fewer than ret bytes: from
 * the write's iterator where the hook has it (it: fexit, kretprobe), else
 * from the syscall's iovec array when the write has at most 2 * MAX_IOV
 * buffers (so that the first and the last MAX_IOV are all of them): Node's
 * http module writes an event and res.end()'s chunked terminator in one
 * tick as five, and a queue of events behind a slow client as four each.
 * It returns how many of the write's bytes come before io->iov[0], or -1
 * when its end is not found that way. a: the syscall's arguments (NULL:
 * io holds all of the write's buffers). One read of the window, and few
 * values live across it: the programs' call chains come near the
 * verifier's 512 bytes of stack. */
static __always_inline long io_window(struct user_io *io, __u64 ret, const struct syscall_args *a,
				      const struct iov_iter *it)
{
	if (io->nr < MAX_IOV)
		return 0;
	__u64 first = io->iov[0].iov_len + io->iov[1].iov_len + io->iov[2].iov_len + io->iov[3].iov_len;
	if (first >= ret)
		return 0;
	if (it)
		return iter_window(io, ret, it);
	/* io->iov[0] is scratch until the window is read: io is not used
	 * when this fails. */
	if (!a || syscall_iov(a, &io->iov[0]))
		return -1;
	const struct iovec *iov = io->iov[0].iov_base;
	__u64 n = io->iov[0].iov_len;
	if (n <= MAX_IOV || n > 2 * MAX_IOV || bpf_probe_read_user(io->iov, sizeof(io->iov), iov + n - MAX_IOV))
		return -1;
	/* The window's first 2 * MAX_IOV - n buffers are among the first
	 * MAX_IOV: what is before the window is the rest of those. */
	__u64 shared = 0;
	switch (n) {
	case MAX_IOV + 1:
		shared = io->iov[0].iov_len + io->iov[1].iov_len + io->iov[2].iov_len;
		break;
	case MAX_IOV + 2:
		shared = io->iov[0].iov_len + io->iov[1].iov_len;
		break;
	case MAX_IOV + 3:
		shared = io->iov[0].iov_len;
		break;
	}
	if (shared > first) /* the writer changed its buffers meanwhile: no underflow */
		return -1;
	return first - shared;
}

#endif
