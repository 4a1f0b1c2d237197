package lpmfilter

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target amd64 -type twb_lpm4_key -type twb_lpm6_key -type twb_counter_value lpm lpm.bpf.c -- -I../../../bpf/headers
