//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A deliberate copy, this benchmark's baseline: tokenwire's XDP filter
 * with its blocklist in LPM tries behind one-slot arrays of maps (the
 * design the prefix tables replaced), the same frame parsing and per-CPU
 * counters. It is measured against the current filter
 * (bpf/xdp_filter.bpf.c) in the same run, so the code it shares with that
 * file is repeated on purpose; see lpmfilter.go. The rules are those of
 * the current filter without the allowlist. */
#include "vmlinux.h"
#include "bpf_helpers.h"
#include "bpf_endian.h"

/* The layouts the old filter shared through tokenwire.h, under names of
 * their own so that the two programs cannot be mixed up. */
enum { TWB_DROP = 1, TWB_PASS = 2, TWB_ACTION_MAX = 3 };
enum { TWB_NONE = 0, TWB_BLOCKLIST, TWB_MALFORMED, TWB_REASON_MAX };
#define TWB_SLOTS (TWB_ACTION_MAX * TWB_REASON_MAX)

struct twb_counter_value {
	__u64 packets;
	__u64 bytes;
};

struct twb_lpm4_key {
	__u32 prefixlen;
	__u8 addr[4];
};

struct twb_lpm6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

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
const struct twb_lpm4_key *unused_twb_lpm4_key __attribute__((unused));
const struct twb_lpm6_key *unused_twb_lpm6_key __attribute__((unused));

/* The blocklist tries. max_entries here is the default; user space creates
 * the real tries with the configured capacity. */
struct lpm4 {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct twb_lpm4_key);
	__type(value, __u8);
};

struct lpm6 {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct twb_lpm6_key);
	__type(value, __u8);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct lpm4);
} twb_lpm_block4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct lpm6);
} twb_lpm_block6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TWB_SLOTS);
	__type(key, __u32);
	__type(value, struct twb_counter_value);
} twb_lpm_counters SEC(".maps");


/* slot packs an (action, reason) verdict into a counter slot. */
#define slot(action, reason) ((action) * TWB_REASON_MAX + (reason))
#define PASS slot(TWB_PASS, TWB_NONE)
#define DROP_BLOCKLIST slot(TWB_DROP, TWB_BLOCKLIST)
#define DROP_MALFORMED slot(TWB_DROP, TWB_MALFORMED)

static __always_inline __u32 blocked4(const struct iphdr *ip)
{
	__u32 zero = 0;
	void *trie = bpf_map_lookup_elem(&twb_lpm_block4, &zero);
	if (!trie)
		return 0; /* no trie installed yet: nothing is blocked */
	struct twb_lpm4_key key = { .prefixlen = 32 };
	__builtin_memcpy(key.addr, &ip->saddr, sizeof(key.addr));
	return bpf_map_lookup_elem(trie, &key) != NULL;
}

static __always_inline __u32 blocked6(const struct ipv6hdr *ip6)
{
	__u32 zero = 0;
	void *trie = bpf_map_lookup_elem(&twb_lpm_block6, &zero);
	if (!trie)
		return 0;
	struct twb_lpm6_key key = { .prefixlen = 128 };
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
int twb_xdp_lpm(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 idx = classify(data, data_end);

	struct twb_counter_value *c = bpf_map_lookup_elem(&twb_lpm_counters, &idx);
	if (c) {
		/* This CPU's own slot: plain adds, no atomics. */
		c->packets += 1;
		c->bytes += data_end - data;
	}
	return idx / TWB_REASON_MAX; /* the action: DROP or PASS */
}
