// Package preflight checks, before anything is loaded, that this process
// can run BPF programs, and says precisely what is missing when it cannot.
//
// Without it the user would see the kernel's bare EPERM from the first
// bpf() call, which names neither the capability nor the fix.
package preflight

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// BTFPath is where the kernel exposes its own type information.
const BTFPath = "/sys/kernel/btf/vmlinux"

// Capability numbers from linux/capability.h (CAP_BPF and CAP_PERFMON are
// 5.8+; older kernels fold both into CAP_SYS_ADMIN).
const (
	capNetAdmin = 12
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// Needs says which privileges the enabled features require.
type Needs struct {
	// NetAdmin is required to attach XDP programs.
	NetAdmin bool
}

// Check returns nil when this process has kernel BTF, the capabilities in
// needs and a bpf() system call it may use, or an error naming what is
// missing and how to grant it.
func Check(needs Needs) error {
	caps, err := effectiveCaps()
	if err != nil {
		return fmt.Errorf("reading this process's capabilities: %w", err)
	}
	_, btfErr := os.Stat(BTFPath)
	if err := check(needs, caps, btfErr); err != nil {
		return err
	}
	return checkSyscall(bpfReachable(), seccompMode())
}

func check(needs Needs, caps uint64, btfErr error) error {
	var problems []string
	if btfErr != nil {
		// A container sees the host's /sys/kernel/btf through its own
		// /sys: no mount is needed, and a missing file means the kernel
		// has no BTF.
		problems = append(problems, fmt.Sprintf(
			"kernel BTF is missing (%v): tokenwire needs a kernel built with CONFIG_DEBUG_INFO_BTF=y, "+
				"which most distributions ship (Debian 11+, Ubuntu 20.10+, RHEL 8.2+, Amazon Linux 2023)", btfErr))
	}
	has := func(c uint) bool { return caps&(1<<c) != 0 }
	var missing []string
	if !has(capSysAdmin) {
		if !has(capBPF) {
			missing = append(missing, "CAP_BPF")
		}
		if !has(capPerfmon) {
			missing = append(missing, "CAP_PERFMON")
		}
	}
	if needs.NetAdmin && !has(capNetAdmin) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if len(missing) > 0 {
		grant := "cap_bpf,cap_perfmon"
		if needs.NetAdmin {
			grant += ",cap_net_admin"
		}
		problems = append(problems, fmt.Sprintf(
			"missing capabilities %s: run the collector as root, or grant them to the binary "+
				"(sudo setcap %s+ep ./_build/tokenwire) or, on Kubernetes, "+
				"add them to the container's securityContext.capabilities",
			strings.Join(missing, ", "), grant))
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New("tokenwire cannot load its BPF programs: " + strings.Join(problems, "; "))
}

func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}
