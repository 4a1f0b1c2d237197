// Package bpf holds tokenwire's BPF C programs and the Go bindings and
// objects that bpf2go generates from them.
//
// The generated files are committed so that a plain `go build` (and an ocb
// gomod entry) works without clang; `make generate` reproduces them.
package bpf

//go:generate sh -c "test -n \"$BPF_CLANG\" || { echo 'BPF_CLANG and BPF_CFLAGS are unset: run make generate (the Makefile owns the BPF compiler and flags)' >&2; exit 1; }"
//go:generate go tool bpf2go -cc $BPF_CLANG -cflags $BPF_CFLAGS -target amd64 -type handshake_event -type tw_endpoints -type tw_counter -type tw_role -type tw_handshake_flag Handshake handshake.bpf.c -- -I./headers -I.
