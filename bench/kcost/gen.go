package main

//go:generate sh -c "test -n \"$BPF_CLANG\" || { echo 'BPF_CLANG and BPF_CFLAGS are unset: run make generate (the Makefile owns the BPF compiler and flags)' >&2; exit 1; }"
//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target amd64 floor floor.bpf.c -- -I../../bpf/headers
//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target amd64 parts parts.bpf.c -- -I../../bpf/headers -I../../bpf
