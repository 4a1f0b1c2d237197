//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Empty programs on the stream probe's hooks: the cost floor that the real
 * programs are measured against (make bench). Never loaded by the receiver. */
#include "vmlinux.h"
#include "bpf_helpers.h"
#include "bpf_tracing.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("tp_btf/sk_data_ready")
int BPF_PROG(tw_fl_ready) { return 0; }

SEC("tp_btf/sock_recv_length")
int BPF_PROG(tw_fl_recv) { return 0; }

SEC("tp_btf/sock_send_length")
int BPF_PROG(tw_fl_sent) { return 0; }

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(tw_fl_state) { return 0; }
