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
 *     Otherwise the source address is looked up: in the blocklist ->
 *     drop, blocklist; else pass.
 *     Fragments: every fragment, first or not, carries the full IPv4
 *     header with the source address, and nothing here reads past the IP
 *     header, so every fragment gets the same checks and the same
 *     blocklist lookup. A blocked source cannot slip non-first fragments
 *     through, and no reassembly state is needed.
 *  4. EtherType IPv6 (0x86dd) -> drop, malformed when fewer than 40 bytes
 *     follow, the version nibble is not 6, or the payload length is more
 *     than the bytes after the fixed header (0 is allowed: jumbograms).
 *     Otherwise the source address is looked up as for IPv4. Extension
 *     headers are not walked: the source is in the fixed header.
 *  5. Anything else (ARP, LLDP, 802.3 length fields, a third VLAN tag,
 *     ...) -> pass.
 *
 * Malformed is decided before the blocklist: the fields of a broken header
 * are not trusted, so such a frame is counted as malformed whatever its
 * source.
 *
 * Every read is preceded by a bounds check against data_end, so no input
 * can make the program read outside the frame (the verifier enforces it).
 *
 * Maps:
 *  - tw_xdp_block4 / tw_xdp_block6: one-slot arrays of maps whose slot 0 is
 *    the current LPM trie (tw_xdp_lpm4 / tw_xdp_lpm6, created by user
 *    space). A reload builds a new trie and swaps the slot; the kernel
 *    waits for running programs (synchronize_rcu) before the update
 *    returns, so the switch is atomic and complete when user space hears
 *    of it.
 *  - tw_xdp_counters: per-CPU array, one slot per (action, reason), packets
 *    and bytes. One program instance (and one counter array) is loaded per
 *    interface, so counters are per interface without hashing ifindexes.
 * The hot path is two array lookups (inlined by the verifier), one trie
 * lookup for IP frames and two in-place adds: no timestamp, no upsert.
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
const struct tw_xdp_lpm4_key *unused_tw_xdp_lpm4_key __attribute__((unused));
const struct tw_xdp_lpm6_key *unused_tw_xdp_lpm6_key __attribute__((unused));

/* The blocklist tries. max_entries here is the default; user space creates
 * the real tries with the configured capacity. */
struct lpm4 {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct tw_xdp_lpm4_key);
	__type(value, __u8);
};

struct lpm6 {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct tw_xdp_lpm6_key);
	__type(value, __u8);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct lpm4);
} tw_xdp_block4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct lpm6);
} tw_xdp_block6 SEC(".maps");

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

/* slot packs an (action, reason) verdict into a counter slot. */
#define slot(action, reason) ((action) * TW_XDP_REASON_MAX + (reason))
#define PASS slot(TW_XDP_ACTION_PASS, TW_XDP_REASON_NONE)
#define DROP_BLOCKLIST slot(TW_XDP_ACTION_DROP, TW_XDP_REASON_BLOCKLIST)
#define DROP_MALFORMED slot(TW_XDP_ACTION_DROP, TW_XDP_REASON_MALFORMED)

static __always_inline __u32 blocked4(const struct iphdr *ip)
{
	__u32 zero = 0;
	void *trie = bpf_map_lookup_elem(&tw_xdp_block4, &zero);
	if (!trie)
		return 0; /* no trie installed yet: nothing is blocked */
	struct tw_xdp_lpm4_key key = { .prefixlen = 32 };
	__builtin_memcpy(key.addr, &ip->saddr, sizeof(key.addr));
	return bpf_map_lookup_elem(trie, &key) != NULL;
}

static __always_inline __u32 blocked6(const struct ipv6hdr *ip6)
{
	__u32 zero = 0;
	void *trie = bpf_map_lookup_elem(&tw_xdp_block6, &zero);
	if (!trie)
		return 0;
	struct tw_xdp_lpm6_key key = { .prefixlen = 128 };
	__builtin_memcpy(key.addr, &ip6->saddr, sizeof(key.addr));
	return bpf_map_lookup_elem(trie, &key) != NULL;
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
		return blocked4(ip) ? DROP_BLOCKLIST : PASS;
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
		return blocked6(ip6) ? DROP_BLOCKLIST : PASS;
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
