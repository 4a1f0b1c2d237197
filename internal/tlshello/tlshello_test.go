package tlshello

import (
	"bytes"
	"testing"

	"github.com/tokenwire/tokenwire/internal/streamagg/streamaggtest"
)

// clientHello returns the first write of a crypto/tls client asking for
// serverName (the ClientHello record, as the kernel copies it).
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	b, err := streamaggtest.ClientHello(serverName)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServerName(t *testing.T) {
	hello := clientHello(t, "api.example.test")
	if got := string(ServerName(hello)); got != "api.example.test" {
		t.Fatalf("ServerName = %q, want api.example.test", got)
	}
	// A client that connects by address sends no server name.
	if got := ServerName(clientHello(t, "127.0.0.1")); got != nil {
		t.Fatalf("ServerName of a hello by address = %q, want none", got)
	}
	if got := ServerName([]byte("POST /v1/chat/completions HTTP/1.1\r\n")); got != nil {
		t.Fatalf("ServerName of a request = %q", got)
	}
}

// TestServerNameOfACutHello: the kernel copies at most the write's first
// slice, so the name is read as far as the bytes go, and a hello cut
// before its name's end has none.
func TestServerNameOfACutHello(t *testing.T) {
	hello := clientHello(t, "api.example.test")
	seen := false
	for n := range len(hello) {
		got := ServerName(hello[:n])
		switch {
		case got == nil:
			if seen {
				t.Fatalf("cut at %d of %d: no name, after one at a shorter cut", n, len(hello))
			}
		case string(got) == "api.example.test":
			seen = true
		default:
			t.Fatalf("cut at %d of %d: %q", n, len(hello), got)
		}
	}
	if !seen {
		t.Fatal("no cut before the end had the name")
	}
}

// TestServerNameRefusesJunk: a name with bytes no DNS name has is none.
func TestServerNameRefusesJunk(t *testing.T) {
	hello := clientHello(t, "abcdefgh.test")
	i := bytes.Index(hello, []byte("abcdefgh"))
	hello[i+3] = ' '
	if got := ServerName(hello); got != nil {
		t.Fatalf("ServerName = %q, want none", got)
	}
}

func FuzzServerName(f *testing.F) {
	f.Add(clientHello(f, "api.example.test"))
	f.Add([]byte{22, 3, 1, 0, 5, 1, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		name := ServerName(b)
		if name != nil && !validName(name) {
			t.Fatalf("ServerName = %q: not a DNS name", name)
		}
	})
}
