package tlsprobe

import (
	"net"
	"os"
	"slices"
	"testing"
)

func TestListenersFindsThisProcess(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := "127.0.0.1:0"
		if network == "tcp6" {
			addr = "[::1]:0"
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		port := uint16(ln.Addr().(*net.TCPAddr).Port)
		found, err := listeners(map[uint16]bool{port: true}, func(uint32) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(found, uint32(os.Getpid())) {
			t.Errorf("%s port %d: listeners %v, want this process %d", network, port, found, os.Getpid())
		}
		skipped, _ := listeners(map[uint16]bool{port: true}, func(uint32) bool { return true })
		if len(skipped) != 0 {
			t.Errorf("skipped processes were looked into: %v", skipped)
		}
		ln.Close()
		if found, _ = listeners(map[uint16]bool{port: true}, func(uint32) bool { return false }); len(found) != 0 {
			t.Errorf("%s port %d closed, still listeners %v", network, port, found)
		}
	}
}

func TestStartTimeTellsProcessesApart(t *testing.T) {
	a, err := startTime(uint32(os.Getpid()))
	if err != nil || a == 0 {
		t.Fatalf("start time %d, %v", a, err)
	}
	if b, _ := startTime(1); b >= a {
		t.Errorf("init started at %d, not before this test (%d)", b, a)
	}
	if _, err := startTime(1 << 30); err == nil {
		t.Error("a pid that does not exist has a start time")
	}
}
