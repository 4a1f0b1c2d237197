package preflight

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"golang.org/x/sys/unix"
)

func TestCheck(t *testing.T) {
	all := uint64(1<<capBPF | 1<<capPerfmon | 1<<capNetAdmin)
	tests := []struct {
		name    string
		needs   Needs
		caps    uint64
		btfErr  error
		want    []string // substrings of the error; none: no error
		wantNot []string
	}{
		{name: "root", caps: ^uint64(0)},
		{name: "fine-grained capabilities", needs: Needs{NetAdmin: true}, caps: all},
		{name: "CAP_SYS_ADMIN covers BPF and PERFMON", caps: 1 << capSysAdmin},
		{
			name: "no capabilities", needs: Needs{NetAdmin: true},
			want: []string{"missing capabilities CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN", "run the collector as root", "setcap cap_bpf,cap_perfmon,cap_net_admin+ep"},
		},
		{
			name: "only CAP_PERFMON missing", caps: 1 << capBPF,
			want: []string{"missing capabilities CAP_PERFMON:", "setcap cap_bpf,cap_perfmon+ep"}, wantNot: []string{"CAP_BPF,", "CAP_NET_ADMIN", "cap_net_admin"},
		},
		{
			name: "no BTF", caps: ^uint64(0), btfErr: &os.PathError{Op: "stat", Path: BTFPath, Err: os.ErrNotExist},
			want: []string{"kernel BTF is missing", BTFPath, "CONFIG_DEBUG_INFO_BTF=y"}, wantNot: []string{"capabilities"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(tt.needs, tt.caps, tt.btfErr)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error %q should not mention %q", err, w)
				}
			}
		})
	}
}

func TestCheckThisProcess(t *testing.T) {
	err := Check(Needs{NetAdmin: true})
	if os.Geteuid() == 0 {
		if _, statErr := os.Stat(BTFPath); statErr == nil && err != nil {
			t.Fatalf("root with BTF failed the check: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "CAP_") {
		t.Fatalf("unprivileged process passed or got a vague error: %v", err)
	}
}

func TestCheckSyscallMessages(t *testing.T) {
	if err := checkSyscall(nil, 2); err != nil {
		t.Fatalf("a reachable bpf() failed the check: %v", err)
	}
	err := checkSyscall(unix.EPERM, 2)
	if err == nil || !strings.Contains(err.Error(), "seccomp filter refuses the bpf() system call") ||
		strings.Contains(err.Error(), "MEMLOCK") {
		t.Errorf("seccomp refusal: %v", err)
	}
	if err := checkSyscall(unix.EPERM, 0); err == nil || !strings.Contains(err.Error(), "security module") {
		t.Errorf("refusal without seccomp: %v", err)
	}
}

// seccompChildEnv makes the test binary, run again as a child, refuse
// bpf() with a seccomp filter and print what Check says.
const seccompChildEnv = "TOKENWIRE_PREFLIGHT_SECCOMP_CHILD"

// TestSeccompRefusalIsNamed runs Check in a child process whose seccomp
// filter refuses bpf() the way Docker's default profile does.
func TestSeccompRefusalIsNamed(t *testing.T) {
	if os.Getenv(seccompChildEnv) != "" {
		if err := refuseBPF(); err != nil {
			fmt.Println("installing the filter:", err)
			os.Exit(2)
		}
		fmt.Println("check:", Check(Needs{}))
		os.Exit(0)
	}
	bpftest.Require(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSeccompRefusalIsNamed$")
	cmd.Env = append(os.Environ(), seccompChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "seccomp filter refuses the bpf() system call") {
		t.Fatalf("Check under a seccomp filter that refuses bpf() said:\n%s", out)
	}
}

// refuseBPF installs, on every thread of the process, a seccomp filter
// that answers bpf() with EPERM and allows everything else.
func refuseBPF() error {
	const (
		ldAbsW   = 0x20 // BPF_LD | BPF_W | BPF_ABS
		jeqK     = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
		retK     = 0x06 // BPF_RET | BPF_K
		retErrno = 0x00050000
		retAllow = 0x7fff0000
	)
	filter := []unix.SockFilter{
		{Code: ldAbsW, K: 0}, // seccomp_data.nr
		{Code: jeqK, Jt: 0, Jf: 1, K: unix.SYS_BPF},
		{Code: retK, K: retErrno | uint32(unix.EPERM)},
		{Code: retK, K: retAllow},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); errno != 0 {
		return errno
	}
	return nil
}
