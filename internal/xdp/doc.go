// Package xdp loads tokenwire's XDP filter, attaches it to network
// interfaces, keeps its blocklist up to date and reads its counters.
//
// # What the program does
//
// The kernel side is bpf/xdp_filter.bpf.c; its header comment is the
// authoritative list of rules. In short: it parses Ethernet, up to two VLAN
// tags (802.1Q, 802.1ad), IPv4 (with options) and IPv6; it drops frames
// whose headers are truncated or inconsistent (reason "malformed"), then
// frames whose source address is in the blocklist (reason "blocklist"), and
// passes everything else (reason "none"), ARP and other EtherTypes
// included. IPv4 fragments are not special: every fragment carries the
// source address, so every fragment, first or not, is checked against the
// blocklist and dropped when it matches.
//
// # Counters per interface
//
// One program instance, with its own per-CPU counter array, is loaded per
// interface; all instances share the blocklist maps. The alternative, one
// program keyed by ingress_ifindex, needs a hash map (ifindexes are sparse)
// that user space must pre-populate or the program must upsert into, on the
// hot path. Per-interface instances keep the hot path to array lookups
// modified in place, cost one verifier run per interface at start, and make
// an interface that goes away a local matter (its instance's link goes
// defunct; the others do not notice).
//
// # Blocklist reloads
//
// The blocklist is two LPM tries (IPv4, IPv6) reached through one-slot
// array-of-maps (tw_xdp_block4, tw_xdp_block6). Reload builds complete new
// tries off to the side and then swaps the slot. A packet therefore sees
// either the old or the new list, never a mix and never an empty one, and
// a list larger than the free capacity still fits because the old trie is
// not edited. The kernel waits for running XDP programs (synchronize_rcu)
// before the map update returns, so when Reload returns no program still
// reads the old list: no packet from a newly blocked source passes after
// that point. (Insert-new-then-delete-stale would also be window-free for
// drops, but needs old+new entries at once in a trie of fixed capacity,
// and an "active index" over two fixed tries needs its own grace period
// before the inactive trie may be cleared.)
//
// # Attaching and fail-safe behaviour
//
// Programs are attached with BPF links (BPF_LINK_CREATE), held only by this
// process's file descriptors and never pinned. When the process closes them
// (Close) or dies (crash, SIGKILL, OOM), the kernel detaches the program and
// the interface passes all traffic again, as if tokenwire had never been
// there: the filter fails open. An interface that already has an XDP
// program, whoever attached it, is refused with ErrForeignProgram rather
// than replaced. The interfaces are looked up in the network namespace of
// the calling thread.
package xdp
