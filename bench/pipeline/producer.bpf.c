//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Bench-only kernel-side record producer for bench/pipeline.
 *
 * A tc program (so that BPF_PROG_TEST_RUN can run it with repeat; an XDP
 * program would do too, but each XDP test run swaps the XDP dispatcher
 * twice, about a millisecond per call here) that, each time it runs, writes one stream record, in the layouts the real
 * stream probe writes (bpf/tokenwire.h), into the ring buffer
 * tw_st_events. User space replaces that map with the real stream
 * tracer's ring buffer, so the records go through the product's reader
 * and decoder. A failed reservation (ring full: the record would be lost)
 * is counted in `lost`.
 *
 * Two kinds of traffic, chosen by `whole_streams` between runs:
 *  - 0: END records only, each for a stream never seen before (the
 *    ring -> record stage: the smallest record, decoded and dropped);
 *  - 1: whole streams: REQUEST (a request head with a JSON body),
 *    RESPONSE (an SSE response head), PROGRESS and END, for 2^shift
 *    streams in flight at once, each phase written for all of them before
 *    the next, so the receiver keeps that many streams open. The request
 *    cycles through 8 paths and 4 models (one digit each, patched in).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "tokenwire.h"
#include "ringbuf.h"

#define TC_ACT_OK 0

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} tw_st_events SEC(".maps");

/* A REQUEST or RESPONSE record as the stream probe writes one: the
 * header, then id.len bytes. */
struct bench_payload {
	struct stream_payload h;
	__u8 data[TW_PEEK_MAX];
};

__u64 produced = 0;
__u64 lost = 0;
__u32 whole_streams = 0;

/* Set before load. */
const volatile __u8 req_head[TW_PEEK_MAX];
const volatile __u16 req_len = 0;
const volatile __u8 resp_head[TW_PEEK_MAX];
const volatile __u16 resp_len = 0;
const volatile __u32 path_digit = 0;  /* offset in req_head of the path digit */
const volatile __u32 model_digit = 0; /* offset in req_head of the model digit */
const volatile __u32 shift = 9;       /* 2^shift streams in flight */
const volatile __u32 bench_pid = 4242;

static __always_inline void fill_stats(struct stream_stats *r, __u64 now, __u32 last)
{
	r->req_ts = now - 120000000;
	r->headers_ts = now - 100000000;
	r->first_chunk_ts = now - 100000000;
	r->last_chunk_ts = now - 1000000;
	r->end_ts = now;
	r->bytes = last ? 4000 : 2000;
	r->gap_sum_ns = last ? 99000000 : 49000000;
	r->gap_max_ns = 2000000;
	r->chunks = last ? 100 : 50;
	r->pid = bench_pid;
	r->gap_counts[3] = last ? 50 : 49;
	r->ep.saddr[0] = 127; r->ep.saddr[3] = 1;
	r->ep.daddr[0] = 127; r->ep.daddr[3] = 1;
	r->ep.sport = 8000;
	r->ep.family = 2; /* AF_INET */
}

static __always_inline int end_only(__u64 n)
{
	struct stream_stats *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return TC_ACT_OK;
	}
	__u64 now = bpf_ktime_get_ns();
	__builtin_memset(r, 0, sizeof(*r));
	r->id.sock = 0xffff000000000000ULL | (n & 0xffff); /* 65536 distinct sockets */
	r->id.seq = (__u32)(n >> 16);
	r->id.kind = TW_REC_END;
	r->id.reason = TW_END_TERMINATOR;
	fill_stats(r, now, 1);
	r->head_bytes = 120;
	r->ep.dport = 40000 + (n & 0x3ff);
	bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
	return TC_ACT_OK;
}

static __always_inline int whole(__u64 n)
{
	__u32 sh = shift & 15;
	__u64 slot = n & ((1ULL << sh) - 1);
	__u32 phase = (n >> sh) & 3;
	__u32 round = n >> (sh + 2);
	__u64 sock = 0xffff100000000000ULL | slot;

	if (phase < 2) {
		struct bench_payload *p = bpf_ringbuf_reserve(&tw_st_events, sizeof(*p), 0);
		if (!p) {
			__sync_fetch_and_add(&lost, 1);
			return TC_ACT_OK;
		}
		__builtin_memset(&p->h, 0, sizeof(p->h));
		p->h.id.sock = sock;
		p->h.id.seq = round;
		p->h.ts_ns = bpf_ktime_get_ns();
		p->h.pid = bench_pid;
		p->h.comm[0] = 'b'; p->h.comm[1] = 'e'; p->h.comm[2] = 'n'; p->h.comm[3] = 'c'; p->h.comm[4] = 'h';
		if (phase == 0) {
			p->h.id.kind = TW_REC_REQUEST;
			p->h.id.len = req_len;
			p->h.total = req_len;
			__builtin_memcpy(p->data, (const void *)req_head, TW_PEEK_MAX);
			if (path_digit < TW_PEEK_MAX)
				p->data[path_digit] = '0' + (slot & 7);
			if (model_digit < TW_PEEK_MAX)
				p->data[model_digit] = '0' + ((slot >> 3) & 3);
		} else {
			p->h.id.kind = TW_REC_RESPONSE;
			p->h.id.reason = TW_RESP_HTTP;
			p->h.id.len = resp_len;
			p->h.total = resp_len;
			__builtin_memcpy(p->data, (const void *)resp_head, TW_PEEK_MAX);
		}
		bpf_ringbuf_submit(p, submit_flags(&tw_st_events));
		return TC_ACT_OK;
	}
	struct stream_stats *r = bpf_ringbuf_reserve(&tw_st_events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&lost, 1);
		return TC_ACT_OK;
	}
	__builtin_memset(r, 0, sizeof(*r));
	r->id.sock = sock;
	r->id.seq = round;
	r->id.kind = phase == 2 ? TW_REC_PROGRESS : TW_REC_END;
	r->id.reason = phase == 2 ? 0 : TW_END_TERMINATOR;
	fill_stats(r, bpf_ktime_get_ns(), phase == 3);
	r->head_bytes = resp_len;
	r->ep.dport = 40000 + (slot & 0x3ff);
	bpf_ringbuf_submit(r, submit_flags(&tw_st_events));
	return TC_ACT_OK;
}

SEC("tc")
int tw_bench_produce(struct __sk_buff *ctx)
{
	__u64 n = __sync_fetch_and_add(&produced, 1);
	if (whole_streams)
		return whole(n);
	return end_only(n);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
