package bpf

//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target amd64 -type tw_xdp_action -type tw_xdp_reason -type tw_xdp_counter_slot -type tw_xdp_counter_value -type tw_xdp_bucket4 -type tw_xdp_bucket6 -type tw_xdp_head4 -type tw_xdp_head6 -type tw_xdp_index4 -type tw_xdp_index6 XdpFilter xdp_filter.bpf.c -- -I./headers -I.
