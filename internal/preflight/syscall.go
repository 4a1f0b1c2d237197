package preflight

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// bpfProbeCmd is no bpf() command: a kernel that lets the call through
// answers EINVAL, before it allocates or charges anything.
const bpfProbeCmd = 0xffff

// bpfReachable calls bpf() with a command that does not exist: EINVAL
// means the call reached the kernel's command switch; EPERM that
// something refused the call itself (a seccomp filter, an LSM).
func bpfReachable() error {
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfProbeCmd, 0, 0)
	if errno == unix.EINVAL || errno == 0 {
		return nil
	}
	return errno
}

// seccompMode reads this process's seccomp mode from /proc/self/status:
// 0 none, 1 strict, 2 filter; -1 when unknown.
func seccompMode() int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Seccomp:"); ok {
			var mode int
			if _, err := fmt.Sscan(strings.TrimSpace(v), &mode); err == nil {
				return mode
			}
		}
	}
	return -1
}

// checkSyscall turns a refused bpf() into what refused it and the fix.
// Without it the refusal surfaces later as an EPERM from the first map
// creation, which cilium/ebpf attributes to RLIMIT_MEMLOCK.
func checkSyscall(reach error, seccomp int) error {
	if reach == nil {
		return nil
	}
	if !errors.Is(reach, unix.EPERM) {
		return fmt.Errorf("tokenwire cannot load its BPF programs: the bpf() system call fails: %w", reach)
	}
	if seccomp == 2 {
		return fmt.Errorf("tokenwire cannot load its BPF programs: a seccomp filter refuses the bpf() system call (%w) "+
			"although this process has the capabilities: container runtimes' default profiles allow bpf() with "+
			"CAP_BPF only since Docker 23.0 and containerd 1.6.9 (before, only with CAP_SYS_ADMIN); upgrade the runtime, "+
			"or run with a profile that allows bpf (docker run --security-opt seccomp=unconfined; on Kubernetes "+
			"securityContext.seccompProfile.type: Unconfined)", reach)
	}
	return fmt.Errorf("tokenwire cannot load its BPF programs: the bpf() system call is refused (%w) although this "+
		"process has the capabilities: a security module (SELinux, AppArmor) or kernel lockdown refuses it; "+
		"see the kernel log (dmesg) for which", reach)
}
