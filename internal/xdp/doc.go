// Package xdp loads tokenwire's XDP filter, attaches it to network
// interfaces, keeps its blocklist up to date and reads its counters.
//
// # What the program does
//
// The kernel side is bpf/xdp_filter.bpf.c; its header comment is the
// authoritative list of rules. In short: it parses Ethernet, up to two VLAN
// tags (802.1Q, 802.1ad), IPv4 (with options) and IPv6; it drops frames
// whose headers are truncated or inconsistent (reason "malformed"), then
// frames whose source address is in the blocklist (reason "blocklist")
// unless it is also in the allowlist, which wins (passed, reason
// "allowlist": the packets the allowlist saved from a drop), and passes
// everything else (reason "none"), ARP and other EtherTypes included. IPv4
// fragments are not special: every fragment carries the source address, so
// every fragment, first or not, is checked against the lists.
//
// # A blocklist that cannot cut the node off by accident
//
// Every blocklist prefix, from the configuration, the file or Reload, must
// be at least /MinPrefixLen4 (IPv4, default /8) or /MinPrefixLen6 (IPv6,
// default /32) long, and 0.0.0.0/0 and ::/0 need PermitBlockAll whatever
// the minimums. The allowlist (Config.Allowlist) has no minimum and wins
// over the blocklist. A list that breaks a rule, has a bad line or exceeds
// the capacity is refused as a whole with an error naming the entry (file
// and line for the file), never truncated or applied in part: at Open
// that fails Open, on a reload the previous list stays in force and the
// failure is counted under its FailureReason.
//
// # Prefix tables
//
// Each list is a hash table per family (tokenwire.h, "Prefix tables"):
// for each prefix length that can hold the source, longest first, the
// program masks the source and looks the masked address up. Membership
// needs no longest match, blocklists use few distinct lengths, and the
// lookups are multiply-shift hashes into arrays the verifier inlines
// (BENCHMARKS.md compares them with LPM trie walks). The cost grows with
// the number of lengths probed, not of prefixes. Two things keep that
// number small. A length index in the same table (table.go, lengthIndex)
// gives, per /16 (IPv4) or /32 (IPv6) of the source, folded to a slot,
// the lengths of the prefixes that can contain it, so a source in no
// prefix usually probes none or one. And where the table has room the rare
// lengths are expanded into the next longer one present (a /23 becomes
// two /24s), choosing the fewest lengths that fit (expand.go). A lookup in
// the allowlist happens only for a blocklisted source, and not at all when
// a family's allowlist is empty.
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
// The tables are reached through one-slot array-of-maps (tw_xdp_block4,
// tw_xdp_block6; tw_xdp_allow4, tw_xdp_allow6 for the allowlist). Reload
// builds complete new tables off to the side and then swaps the slot; a
// table carries its own lengths bitmap and hash seeds, so nothing outside
// the swapped map can disagree with it. A packet therefore sees either the
// old or the new list, never a mix and never an empty one, and a list
// larger than the free capacity still fits because the old table is not
// edited. The kernel waits for running XDP programs (synchronize_rcu)
// before the map update returns, so when Reload returns no program still
// reads the old list: no packet from a newly blocked source passes after
// that point.
//
// # The blocklist file
//
// The file is polled every WatchInterval and a changed version is applied
// only once it has stayed the same (size, times, inode and SHA-256 of its
// content) from one poll to the next: a file still being written (`cat >
// file`, an editor saving in place) is not applied half-way, and a
// temp-and-rename replacement is applied one interval after it appears.
// A writer that can pause for longer than an interval needs EndMarker: a
// file whose last line is not the marker is refused as incomplete. Each
// version is decided once: applied, or refused and counted once.
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
