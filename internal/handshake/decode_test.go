package handshake

import (
	"net/netip"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tokenwire/tokenwire/bpf"
)

// encode builds a raw record the way the kernel lays it out, through the
// bpf2go type, so a drift between tokenwire.h and Decode shows up here.
func encode(e bpf.HandshakeEvent) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e))
}

func TestDecode(t *testing.T) {
	if recordSize != 64 {
		t.Fatalf("struct handshake_event is %d bytes, want 64", recordSize)
	}
	ok := bpf.HandshakeEvent{
		DurationNs: 1234567, Pid: 42, Ep: bpf.HandshakeTwEndpoints{Sport: 40000, Dport: 8000, Family: syscall.AF_INET},
		Role: bpf.RoleClient, Retransmits: 1,
	}
	copy(ok.Ep.Saddr[:], []byte{192, 0, 2, 1})
	copy(ok.Ep.Daddr[:], []byte{192, 0, 2, 2})

	v6 := bpf.HandshakeEvent{
		DurationNs: 5000, Ep: bpf.HandshakeTwEndpoints{Sport: 8000, Dport: 50000, Family: syscall.AF_INET6},
		Role: bpf.RoleServer, Flags: bpf.HandshakeSynackRetransmitted,
	}
	copy(v6.Ep.Saddr[:], netip.MustParseAddr("2001:db8::1").AsSlice())
	copy(v6.Ep.Daddr[:], netip.MustParseAddr("2001:db8::2").AsSlice())

	failed := ok
	failed.DurationNs, failed.Flags, failed.Errno = 0, bpf.HandshakeFailed, uint32(syscall.ECONNREFUSED)
	unknown := v6
	unknown.Flags = bpf.HandshakeNoDuration

	tests := []struct {
		name string
		in   bpf.HandshakeEvent
		want Event
	}{
		{"ipv4 client", ok, Event{
			Role: RoleClient, Duration: 1234567 * time.Nanosecond, HasDuration: true, PID: 42, Retransmits: 1,
			Local: netip.MustParseAddrPort("192.0.2.1:40000"), Remote: netip.MustParseAddrPort("192.0.2.2:8000"),
		}},
		{"ipv6 server after SYN-ACK retransmit", v6, Event{
			Role: RoleServer, Duration: 5 * time.Microsecond, HasDuration: true, SynackRetransmitted: true,
			Local: netip.MustParseAddrPort("[2001:db8::1]:8000"), Remote: netip.MustParseAddrPort("[2001:db8::2]:50000"),
		}},
		{"refused", failed, Event{
			Role: RoleClient, Failed: true, Errno: syscall.ECONNREFUSED, PID: 42, Retransmits: 1,
			Local: netip.MustParseAddrPort("192.0.2.1:40000"), Remote: netip.MustParseAddrPort("192.0.2.2:8000"),
		}},
		{"duration unknown", unknown, Event{
			Role:  RoleServer,
			Local: netip.MustParseAddrPort("[2001:db8::1]:8000"), Remote: netip.MustParseAddrPort("[2001:db8::2]:50000"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Event
			if err := Decode(encode(tt.in), &got); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if err := Decode(make([]byte, 63), new(Event)); err == nil {
		t.Fatal("Decode accepted a short record")
	}
}

func TestDecodeAllocatesNothing(t *testing.T) {
	raw := encode(bpf.HandshakeEvent{DurationNs: 1, Ep: bpf.HandshakeTwEndpoints{Family: syscall.AF_INET6}, Role: bpf.RoleServer})
	var ev Event
	if n := testing.AllocsPerRun(1000, func() { _ = Decode(raw, &ev) }); n != 0 {
		t.Fatalf("Decode allocates %v times per record, want 0", n)
	}
}

func BenchmarkDecode(b *testing.B) {
	raw := encode(bpf.HandshakeEvent{DurationNs: 1, Ep: bpf.HandshakeTwEndpoints{Family: syscall.AF_INET6}, Role: bpf.RoleServer})
	var ev Event
	b.ReportAllocs()
	for b.Loop() {
		if err := Decode(raw, &ev); err != nil {
			b.Fatal(err)
		}
	}
}
