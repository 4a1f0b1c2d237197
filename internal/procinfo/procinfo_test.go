package procinfo

import (
	"os"
	"path/filepath"
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

func TestLookupThisProcess(t *testing.T) {
	c := NewCache(10)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info := c.Lookup(uint32(os.Getpid()), "fallback")
	if info.Executable != filepath.Base(exe) {
		t.Errorf("executable %q, want %q", info.Executable, filepath.Base(exe))
	}
	if got := c.Lookup(1<<31, "gone"); got.Executable != "gone" {
		t.Errorf("a missing process should keep the fallback name, got %q", got.Executable)
	}
}
