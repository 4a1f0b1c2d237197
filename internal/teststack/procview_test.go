package teststack

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

func TestTLSScanViewShowsListeners(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	view := TLSScanView(os.Getpid())
	// /proc/net/tcp writes 127.0.0.1 as the host-order word 0100007F.
	if want := fmt.Sprintf("(listening on 0100007F:%04X)", port); !strings.Contains(view, want) {
		t.Fatalf("no %q in:\n%s", want, view)
	}
	if !strings.HasPrefix(view, "netns net:[") {
		t.Fatalf("no network namespace in:\n%s", view)
	}
}
