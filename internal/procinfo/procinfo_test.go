package procinfo

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestContainerID(t *testing.T) {
	id := "4f1d8c9a0b7e6d5c4b3a29181716151413121110f0e0d0c0b0a0908070605043"
	tests := map[string]string{
		"0::/system.slice/docker-" + id + ".scope\n":                                    id,
		"0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + id + ".scope\n": id,
		"12:memory:/kubepods/burstable/pod1234/" + id + "\n0::/\n":                      id,
		"0::/user.slice/user-0.slice/session-1.scope\n":                                 "",
		"0::/init.scope\n": "",
		"garbage":          "",
		"0::/system.slice/crio-" + id[:60] + ".scope\n": "",
	}
	for in, want := range tests {
		if got := ContainerID([]byte(in)); got != want {
			t.Errorf("ContainerID(%q) = %q, want %q", in, got, want)
		}
	}
}

// statLine returns a /proc/<pid>/stat line as Linux 6.x writes it (52
// fields), with the given command name and start time (field 22).
func statLine(pid uint32, comm string, start uint64) string {
	return fmt.Sprintf("%d (%s) S 1 %d %d 0 -1 4194560 1500 0 3 0 12 7 0 0 20 0 9 0 %d "+
		"1264893952 25000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		pid, comm, pid, pid, start)
}

func TestParseStartTime(t *testing.T) {
	for _, comm := range []string{
		"vllm",
		"my server",       // spaces
		"a) b (c",         // parentheses and spaces: a parser that stops at the first ')' is off by fields
		") 1 2 3 4 5 6 (", // looks like fields
		"x)",
		"(",
		"new\nline",
		"",
	} {
		line := statLine(4242, comm, 123456789)
		got, err := parseStartTime([]byte(line))
		if err != nil || got != 123456789 {
			t.Errorf("comm %q: parseStartTime = %d, %v; want 123456789", comm, got, err)
		}
	}
	// What a real process writes, read back here.
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		if _, err := parseStartTime(b); err != nil {
			t.Errorf("/proc/self/stat %q: %v", b, err)
		}
	}
	for _, bad := range []string{
		"",
		"4242 vllm S 1 2 3",                    // no parentheses
		"4242 (vllm) S 1 2 3 4 5 6 7 8 9 10\n", // too few fields
		"4242 (vllm) S 1 4242 4242 0 -1 4194560 1500 0 3 0 12 7 0 0 20 0 9 0 12x 1 2\n", // not a number
		"4242 (vllm)  S 1\n", // two spaces: fields are off
	} {
		if got, err := parseStartTime([]byte(bad)); err == nil {
			t.Errorf("parseStartTime(%q) = %d, want an error", bad, got)
		}
	}
	// A line cut after field 22 (a short read) still has it.
	line := statLine(7, "x", 99)
	cut := line[:strings.Index(line, " 99 ")+3]
	if got, err := parseStartTime([]byte(cut)); err != nil || got != 99 {
		t.Errorf("parseStartTime(%q) = %d, %v; want 99", cut, got, err)
	}
}
