package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// qemuArgs are the machine every guest gets. TCG: /dev/kvm on the CI
// machines is a nested layer that cannot run a guest kernel (KERNEL.md).
// -nic none: the guests test over loopback only and must reach nothing.
var qemuArgs = []string{
	"-accel", "tcg,thread=multi", "-cpu", "max", "-m", "2048", "-smp", "2",
	"-nographic", "-no-reboot", "-nic", "none",
}

// kernelCmdline sends the console to the serial port (qemu's stdout) and
// makes a panic end the guest at once (panic=-1 reboots, -no-reboot exits).
const kernelCmdline = "console=ttyS0 panic=-1 quiet loglevel=3"

// skipParam is the kernel parameter that lists the runs the guest's plan
// skips (run ids, comma-separated): /init reads it (InitScript).
const skipParam = "twk_skip"

// BootGuest boots k with the initramfs under qemu, niced and wrapped in timeout(1)
// so that a hung guest ends even if this program is killed, and returns
// the console's lines. The plan skips the runs in skip (an earlier boot
// ended them). limit bounds the whole guest.
func BootGuest(ctx context.Context, k Kernel, initrd string, skip []string, limit time.Duration, logPath string, progress func(Line)) Exec {
	args := []string{"--kill-after=10", fmt.Sprintf("%d", int(limit.Seconds())), "qemu-system-x86_64"}
	args = append(args, qemuArgs...)
	cmdline := kernelCmdline
	if len(skip) > 0 {
		cmdline += " " + skipParam + "=" + strings.Join(skip, ",")
	}
	args = append(args, "-kernel", k.Vmlinuz, "-initrd", initrd, "-append", cmdline)
	// The context outlives timeout(1) a little: it is the backstop.
	ctx, cancel := context.WithTimeout(ctx, limit+30*time.Second)
	defer cancel()
	// Niced: the native row runs at the same time, and its tests' timing
	// must not wait for an emulated CPU.
	return streamCmd(ctx, exec.Command("nice", append([]string{"-n", "10", "timeout"}, args...)...), logPath, progress)
}

// QemuVersion returns the first line of qemu-system-x86_64 --version.
func QemuVersion() string {
	out, err := exec.Command("qemu-system-x86_64", "--version").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

// QemuCommandLine describes how the guests were started, for the report.
func QemuCommandLine() string {
	return "nice -n 10 qemu-system-x86_64 " + strings.Join(qemuArgs, " ") + " -kernel <vmlinuz> -initrd <initramfs> -append \"" + kernelCmdline + "\""
}
