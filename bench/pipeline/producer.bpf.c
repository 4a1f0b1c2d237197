//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Bench-only kernel-side record producer for bench/pipeline.
 *
 * An XDP program (so that BPF_PROG_TEST_RUN can run it with repeat) that,
 * each time it runs, writes one stream END record (struct stream_stats,
 * the layout the real stream probe writes, from bpf/tokenwire.h) into the
 * ring buffer tw_st_events. User space replaces that map with the real
 * stream tracer's ring buffer, so the records go through the product's
 * reader and decoder. A failed reservation (ring full: the record would be
 * lost) is counted in `lost`.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "tokenwire.h"
#include "ringbuf.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} tw_st_events SEC(".maps");

__u64 produced = 0;
__u64 lost = 0;

SEC("xdp")
int tw_bench_produce(struct xdp_md *ctx)
{
	__u64 n = __sync_fetch_and_add(&produced, 1);
	struct stream_stats *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return XDP_PASS;
	}
	__u64 now = bpf_ktime_get_ns();
	__builtin_memset(r, 0, sizeof(*r));
	r->id.sock = 0xffff000000000000ULL | (n & 0xffff); /* 65536 distinct sockets */
	r->id.seq = (__u32)(n >> 16);
	r->id.kind = TW_REC_END;
	r->id.reason = TW_END_TERMINATOR;
	r->req_ts = now - 120000000;
	r->headers_ts = now - 100000000;
	r->first_chunk_ts = now - 100000000;
	r->last_chunk_ts = now - 1000000;
	r->end_ts = now;
	r->bytes = 4000;
	r->gap_sum_ns = 99000000;
	r->gap_max_ns = 2000000;
	r->chunks = 100;
	r->pid = 4242;
	r->gap_counts[3] = 99;
	r->head_bytes = 120;
	r->saddr[0] = 127; r->saddr[3] = 1;
	r->daddr[0] = 127; r->daddr[3] = 1;
	r->sport = 8000;
	r->dport = 40000 + (n & 0x3ff);
	r->family = 2; /* AF_INET */
	bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
