module github.com/tokenwire/tokenwire

go 1.26.8

require github.com/cilium/ebpf v0.22.0

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
