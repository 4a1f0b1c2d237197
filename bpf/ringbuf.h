/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Batched ring-buffer wake-ups, shared by the programs that write records.
 *
 * A wake-up on every record costs an interrupt to the reader's CPU (a
 * self-IPI, which in a VM is a VM exit: microseconds, measured in
 * bench/streams). So records are submitted without a wake-up until
 * wakeup_bytes are waiting; user space reads on a short timer as well
 * (internal/probe.PollInterval), so a quiet ring is still drained promptly.
 */
#ifndef TOKENWIRE_RINGBUF_H
#define TOKENWIRE_RINGBUF_H

/* Set before load; 0 keeps the kernel's default (wake on every record). */
const volatile __u64 wakeup_bytes = 0;

/* wakeup_flags are the submit flags for a record when waiting bytes are
 * in the ring before it. */
static __always_inline __u64 wakeup_flags(__u64 waiting)
{
	if (!wakeup_bytes)
		return 0;
	return waiting >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline __u64 submit_flags(void *ringbuf)
{
	if (!wakeup_bytes)
		return 0;
	return wakeup_flags(bpf_ringbuf_query(ringbuf, BPF_RB_AVAIL_DATA));
}

#endif
