package preflight

import (
	"os"
	"strings"
	"testing"
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
			want: []string{"missing capabilities CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN", "run the collector as root", "setcap"},
		},
		{
			name: "only CAP_PERFMON missing", caps: 1 << capBPF,
			want: []string{"missing capabilities CAP_PERFMON:"}, wantNot: []string{"CAP_BPF,", "CAP_NET_ADMIN"},
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
