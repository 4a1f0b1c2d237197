package bpf

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target amd64 Floor floor.bpf.c -- -I./headers -I.
