package teststack

import "golang.org/x/sys/unix"

// MonotonicNow is CLOCK_MONOTONIC in nanoseconds: the clock BPF programs
// stamp with (bpf_ktime_get_ns), so a kernel time can be checked against a
// bracket taken in user space.
func MonotonicNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
