//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* XDP filter: drop frames from blocklisted source addresses and malformed
 * frames, pass everything else, and count every decision.
 *
 * Rules, in the order they are applied (internal/xdp's reference classifier
 * in the tests implements the same list independently):
 *
 *  1. Ethernet: fewer than 14 bytes -> drop, malformed.
 *  2. Up to two VLAN tags, 802.1Q (0x8100) or 802.1ad (0x88a8) in any
 *     order: a tag claimed but cut short (4 bytes each) -> drop, malformed.
 *     A third tag is not parsed: the frame is "another EtherType" (rule 5).
 *     A tag that the NIC or the kernel already moved into metadata (VLAN
 *     offload, generic mode) is simply not in the frame.
 *  3. EtherType IPv4 (0x0800) -> drop, malformed when
 *       - fewer than 20 bytes follow,
 *       - the version nibble is not 4,
 *       - IHL < 5, or IHL * 4 is more than the bytes that follow (options
 *         cut short),
 *       - total length is more than the bytes that follow, or less than
 *         IHL * 4.
 *     Trailing bytes after total length (Ethernet padding) are fine.
 *     Otherwise the source address is looked up (rule 6).
 *     Fragments: every fragment, first or not, carries the full IPv4
 *     header with the source address, and nothing here reads past the IP
 *     header, so every fragment gets the same checks and the same
 *     blocklist lookup. A blocked source cannot slip non-first fragments
 *     through, and no reassembly state is needed.
 *  4. EtherType IPv6 (0x86dd) -> drop, malformed when fewer than 40 bytes
 *     follow, the version nibble is not 6, or the payload length is more
 *     than the bytes after the fixed header (0 is allowed: jumbograms).
 *     Otherwise the source address is looked up (rule 6). Extension
 *     headers are not walked: the source is in the fixed header.
 *  5. Anything else (ARP, LLDP, 802.3 length fields, a third VLAN tag,
 *     ...) -> pass.
 *  6. A source address in no blocklist prefix -> pass (reason none). One
 *     in a blocklist prefix and in an allowlist prefix -> pass, reason
 *     allowlist: the allowlist wins whatever the prefix lengths. One in a
 *     blocklist prefix only -> drop, blocklist. The allowlist is looked at
 *     only for blocklisted sources, so the allowlist reason counts exactly
 *     the packets the allowlist saved from a drop.
 *
 * Malformed is decided before the blocklist: the fields of a broken header
 * are not trusted, so such a frame is counted as malformed whatever its
 * source.
 *
 * Every read is preceded by a bounds check against data_end, so no input
 * can make the program read outside the frame (the verifier enforces it).
 *
 * Maps:
 *  - tw_xdp_block4 / tw_xdp_block6 and tw_xdp_allow4 / tw_xdp_allow6:
 *    one-slot arrays of maps whose slot 0 is the current prefix table
 *    (tokenwire.h, "Prefix tables"), created and filled by user space. A
 *    reload builds a new table and swaps the slot; the kernel waits for
 *    running programs (synchronize_rcu) before the update returns, so the
 *    switch is atomic and complete when user space hears of it. A table
 *    carries its own bitmap of lengths and its own hash seeds, so nothing
 *    outside the swapped map can disagree with it.
 *  - tw_xdp_counters: per-CPU array, one slot per (action, reason), packets
 *    and bytes. One program instance (and one counter array) is loaded per
 *    interface, so counters are per interface without hashing ifindexes.
 *
 * Why hash tables and not an LPM trie: membership ("is the source in any
 * prefix?") needs no longest match, and blocklists use few distinct
 * lengths. Per length probed, a lookup is a multiply, a shift and one or
 * two bucket reads from an array whose lookups the verifier inlines (all
 * tables of a kind have the template's size, so no BPF_F_INNER_MAP); a
 * trie walk at 65,536 prefixes reads a node per bit it descends
 * (BENCHMARKS.md compares the two). The cost grows with the number of
 * lengths probed, not with the number of prefixes. The length index (one
 * read) limits the probes to the lengths that share the source's /16 or
 * /32 slot, so a source in no prefix, the common case, usually probes one
 * length or none; and user space folds rare lengths into longer ones where
 * the table has room (internal/xdp, expand.go), which bounds the probes
 * for lists spread over many lengths.
 */
#include "vmlinux.h"
#include "bpf_helpers.h"
#include "bpf_endian.h"
#include "tokenwire.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define ETH_HLEN 14
#define VLAN_HLEN 4
#define IPV4_HLEN 20
#define IPV6_HLEN 40

/* Complete definitions in BTF (not forward declarations), which the inner
 * map definitions below need and bpf2go -type reads. */
const struct tw_xdp_bucket4 *unused_tw_xdp_bucket4 __attribute__((unused));
const struct tw_xdp_bucket6 *unused_tw_xdp_bucket6 __attribute__((unused));

/* The prefix tables. max_entries here is a placeholder: user space sets the
 * template to the size derived from the configured capacity before
 * loading, and creates every table with that size. */
struct table4 {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tw_xdp_bucket4);
};

struct table6 {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tw_xdp_bucket6);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct table4);
} tw_xdp_block4 SEC(".maps"), tw_xdp_allow4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct table6);
} tw_xdp_block6 SEC(".maps"), tw_xdp_allow6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TW_XDP_COUNTER_SLOTS);
	__type(key, __u32);
	__type(value, struct tw_xdp_counter_value);
} tw_xdp_counters SEC(".maps");

/* Make the shared enums visible in BTF for bpf2go -type. */
const enum tw_xdp_action *unused_tw_xdp_action __attribute__((unused));
const enum tw_xdp_reason *unused_tw_xdp_reason __attribute__((unused));
const enum tw_xdp_counter_slot *unused_tw_xdp_counter_slot __attribute__((unused));
const struct tw_xdp_head4 *unused_tw_xdp_head4 __attribute__((unused));
const struct tw_xdp_head6 *unused_tw_xdp_head6 __attribute__((unused));

_Static_assert(sizeof(struct tw_xdp_head4) <= sizeof(struct tw_xdp_bucket4), "head4 must fit an element");
_Static_assert(sizeof(struct tw_xdp_head6) <= sizeof(struct tw_xdp_bucket6), "head6 must fit an element");
_Static_assert(sizeof(struct tw_xdp_index4) == sizeof(struct tw_xdp_bucket4), "index4 must be an element");
_Static_assert(sizeof(struct tw_xdp_index6) == sizeof(struct tw_xdp_bucket6), "index6 must be an element");
const struct tw_xdp_index4 *unused_tw_xdp_index4 __attribute__((unused));
const struct tw_xdp_index6 *unused_tw_xdp_index6 __attribute__((unused));

/* slot packs an (action, reason) verdict into a counter slot. */
#define slot(action, reason) ((action) * TW_XDP_REASON_MAX + (reason))
#define PASS slot(TW_XDP_ACTION_PASS, TW_XDP_REASON_NONE)
#define DROP_BLOCKLIST slot(TW_XDP_ACTION_DROP, TW_XDP_REASON_BLOCKLIST)
#define DROP_MALFORMED slot(TW_XDP_ACTION_DROP, TW_XDP_REASON_MALFORMED)
#define PASS_ALLOWLIST slot(TW_XDP_ACTION_PASS, TW_XDP_REASON_ALLOWLIST)

/* ctz64 returns the index of the lowest set bit of x (x != 0): de Bruijn
 * multiplication, since BPF has no count-trailing-zeros instruction. */
static const __u8 debruijn64[64] = {
	0,  1,  2,  53, 3,  7,  54, 27, 4,  38, 41, 8,  34, 55, 48, 28,
	62, 5,  39, 46, 44, 42, 22, 9,  24, 35, 59, 56, 49, 18, 29, 11,
	63, 52, 6,  26, 37, 40, 33, 47, 61, 45, 43, 21, 23, 58, 17, 10,
	51, 25, 36, 32, 60, 20, 57, 16, 50, 31, 19, 15, 30, 14, 13, 12,
};

static __always_inline __u32 ctz64(__u64 x)
{
	return debruijn64[((x & -x) * 0x022fdd63cc95386dULL) >> 58];
}

/* hit4 probes the buckets of an IPv4 key. User space fills a bucket's
 * slots in order and never empties one, and puts a key in its second
 * bucket only when the first is full: a miss in a first bucket whose last
 * slot is free is final, which spares most misses the second read. */
static __always_inline int hit4(void *tbl, const struct tw_xdp_head4 *h, __u64 key)
{
#pragma unroll
	for (int i = 0; i < 2; i++) {
		__u32 idx = 1 + (((key * h->seed[i]) >> (h->shift & 63)) & h->mask);
		struct tw_xdp_bucket4 *b = bpf_map_lookup_elem(tbl, &idx);
		if (!b)
			return 0; /* the mask never exceeds the table; the verifier wants the check */
		if (b->slot[0] == key || b->slot[1] == key || b->slot[2] == key || b->slot[3] == key)
			return 1;
		if (!b->slot[TW_XDP_BUCKET_SLOTS - 1])
			return 0;
	}
	return 0;
}

/* in4 reports whether addr (host order) is in a prefix of the table:
 * for every length in addr's slot of the length index, longest first, the
 * masked address is probed. The loop counter bounds the loop for the
 * verifier; lens has at most 33 bits. */
static __always_inline int in4(void *tbl, __u32 addr)
{
	__u32 zero = 0;
	if (!tbl)
		return 0; /* no table installed yet: nothing matches */
	struct tw_xdp_head4 *h = bpf_map_lookup_elem(tbl, &zero);
	if (!h)
		return 0;
	__u32 slot = (addr >> 16) & (2 * h->mask + 1);
	__u32 elem = h->mask + 2 + slot / TW_XDP_INDEX4_SLOTS;
	struct tw_xdp_index4 *ix = bpf_map_lookup_elem(tbl, &elem);
	if (!ix)
		return 0; /* the index always follows the buckets; the verifier wants the check */
	__u64 lens = ix->lens[slot % TW_XDP_INDEX4_SLOTS] | (h->lens & (1ULL << 32));
	for (int i = 0; i < 33 && lens; i++) {
		__u32 bit = ctz64(lens);
		lens &= lens - 1;
		if (bit > 32)
			break; /* not set by user space; keeps the shift below in range */
		__u32 len = 32 - bit;
		__u32 masked = addr & (__u32)(~0ULL << bit);
		if (hit4(tbl, h, ((__u64)masked << 8) | (len + 1)))
			return 1;
	}
	return 0;
}

/* hit6 probes the buckets of an IPv6 key (hi, lo, len + 1). */
static __always_inline int hit6(void *tbl, const struct tw_xdp_head6 *h, __u64 hi, __u64 lo, __u8 tag)
{
	__u64 lt = lo ^ tag;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		__u32 idx = 1 + (((hi * h->seed[2 * i] + lt * h->seed[2 * i + 1]) >> (h->shift & 63)) & h->mask);
		struct tw_xdp_bucket6 *b = bpf_map_lookup_elem(tbl, &idx);
		if (!b)
			return 0;
#pragma unroll
		for (int s = 0; s < TW_XDP_BUCKET_SLOTS; s++)
			if (b->hi[s] == hi && b->lo[s] == lo && b->len[s] == tag)
				return 1;
		if (!b->len[TW_XDP_BUCKET_SLOTS - 1])
			return 0; /* as in hit4 */
	}
	return 0;
}

/* in6 is in4 for IPv6: the slot's first bitmap holds lengths 128..65
 * (the low half is masked, the high half whole), its second lengths 64..1
 * (the low half is zero), and the head's lens[2] length 0. */
static __always_inline int in6(void *tbl, __u64 hi, __u64 lo)
{
	__u32 zero = 0;
	if (!tbl)
		return 0;
	struct tw_xdp_head6 *h = bpf_map_lookup_elem(tbl, &zero);
	if (!h)
		return 0;
	__u32 slot = (__u32)(hi >> 32) & h->mask;
	__u32 elem = h->mask + 2 + slot / TW_XDP_INDEX6_SLOTS;
	struct tw_xdp_index6 *ix = bpf_map_lookup_elem(tbl, &elem);
	if (!ix)
		return 0;
	__u32 at = 2 * (slot % TW_XDP_INDEX6_SLOTS);
	__u64 lens = ix->lens[at];
	__u64 lens_short = ix->lens[at + 1];
	for (int i = 0; i < 64 && lens; i++) {
		__u32 bit = ctz64(lens) & 63;
		lens &= lens - 1;
		if (hit6(tbl, h, hi, lo & (~0ULL << bit), 128 - bit + 1))
			return 1;
	}
	lens = lens_short;
	for (int i = 0; i < 64 && lens; i++) {
		__u32 bit = ctz64(lens) & 63;
		lens &= lens - 1;
		if (hit6(tbl, h, hi & (~0ULL << bit), 0, 64 - bit + 1))
			return 1;
	}
	return (h->lens[2] & 1) && hit6(tbl, h, 0, 0, 1);
}

/* The blocklist lookups, which every IP packet makes, are inlined into
 * the program: a BPF-to-BPF call costs the callee's prologue, epilogue
 * and return, and on x86 kernels with a return-thunk mitigation (SRSO's
 * safe RET, retbleed's untrained return) every return also goes through
 * the thunk. The price is paid at load: the verifier walks an inlined
 * lookup once per distinct state that reaches it, about twice the
 * instructions in all (under 300,000 of its million on 6.18). The allowlist
 * lookups run only for a blocklisted source, and only when an allowlist
 * is configured, so they stay global functions, each checked once on its
 * own (scalar arguments, scalar result). Either way each map lookup
 * instruction sees one table, which keeps the verifier's inlining of the
 * table lookups. */
static __always_inline int blocked4(__u32 addr)
{
	__u32 zero = 0;
	return in4(bpf_map_lookup_elem(&tw_xdp_block4, &zero), addr);
}

__noinline int allowed4(__u32 addr)
{
	__u32 zero = 0;
	return in4(bpf_map_lookup_elem(&tw_xdp_allow4, &zero), addr);
}

static __always_inline int blocked6(__u64 hi, __u64 lo)
{
	__u32 zero = 0;
	return in6(bpf_map_lookup_elem(&tw_xdp_block6, &zero), hi, lo);
}

__noinline int allowed6(__u64 hi, __u64 lo)
{
	__u32 zero = 0;
	return in6(bpf_map_lookup_elem(&tw_xdp_allow6, &zero), hi, lo);
}

/* Whether the allowlist has IPv4 and IPv6 entries. User space sets them
 * before loading; the allowlist does not change while the programs live,
 * so for an empty one the verifier removes the lookup (a drop then costs
 * no more than without an allowlist). */
volatile const __u8 tw_xdp_allow4_used = 1;
volatile const __u8 tw_xdp_allow6_used = 1;

static __always_inline __u32 verdict4(const struct iphdr *ip)
{
	__u32 a = bpf_ntohl(ip->saddr);
	if (!blocked4(a))
		return PASS;
	return tw_xdp_allow4_used && allowed4(a) ? PASS_ALLOWLIST : DROP_BLOCKLIST;
}

static __always_inline __u32 verdict6(const struct ipv6hdr *ip6)
{
	__u64 hi, lo;
	__builtin_memcpy(&hi, &ip6->saddr, 8);
	__builtin_memcpy(&lo, (void *)&ip6->saddr + 8, 8);
	hi = bpf_be64_to_cpu(hi);
	lo = bpf_be64_to_cpu(lo);
	if (!blocked6(hi, lo))
		return PASS;
	return tw_xdp_allow6_used && allowed6(hi, lo) ? PASS_ALLOWLIST : DROP_BLOCKLIST;
}

/* classify returns the counter slot of the verdict for one frame. */
static __always_inline __u32 classify(void *data, void *data_end)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > data_end)
		return DROP_MALFORMED;
	__u16 proto = eth->h_proto;
	void *cur = eth + 1;

	/* Two VLAN tags at most, unrolled: the verifier sees straight code. */
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		/* TCI (2 bytes), then the encapsulated EtherType (2 bytes). */
		if (cur + VLAN_HLEN > data_end)
			return DROP_MALFORMED;
		proto = *(__u16 *)(cur + 2);
		cur += VLAN_HLEN;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur;
		if ((void *)(ip + 1) > data_end)
			return DROP_MALFORMED;
		if (ip->version != 4 || ip->ihl < 5)
			return DROP_MALFORMED;
		/* Scalars only: no pointer is formed past the fixed header,
		 * because nothing reads the options. */
		__u32 avail = data_end - cur;
		__u32 hlen = ip->ihl * 4;
		__u32 tot = bpf_ntohs(ip->tot_len);
		if (hlen > avail || tot > avail || tot < hlen)
			return DROP_MALFORMED;
		return verdict4(ip);
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;
		if ((void *)(ip6 + 1) > data_end)
			return DROP_MALFORMED;
		if (ip6->version != 6)
			return DROP_MALFORMED;
		__u32 avail = data_end - (void *)(ip6 + 1);
		if (bpf_ntohs(ip6->payload_len) > avail)
			return DROP_MALFORMED;
		return verdict6(ip6);
	}
	return PASS;
}

SEC("xdp")
int tw_xdp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 idx = classify(data, data_end);

	struct tw_xdp_counter_value *c = bpf_map_lookup_elem(&tw_xdp_counters, &idx);
	if (c) {
		/* This CPU's own slot: plain adds, no atomics. */
		c->packets += 1;
		c->bytes += data_end - data;
	}
	return idx / TW_XDP_REASON_MAX; /* the action: DROP or PASS */
}
