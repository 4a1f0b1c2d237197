package main

//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target amd64 producer producer.bpf.c -- -I../../bpf/headers -I../../bpf
