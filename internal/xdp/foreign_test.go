package xdp

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tokenwire/tokenwire/internal/bpftest"
)

// trivialXDP loads a foreign XDP program that passes everything, named
// without our prefix.
func trivialXDP(t *testing.T) *ebpf.Program {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "foreign",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	return prog
}

// attachLegacy attaches (fd >= 0) or detaches (fd = -1) an XDP program the
// old way, through netlink, as `ip link set dev X xdp...` does: such a
// program stays attached after its loader exits.
func attachLegacy(ifindex, fd int, flags uint32) error {
	body := make([]byte, unix.SizeofIfInfomsg)
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&body[0]))
	ifi.Index = int32(ifindex)
	nested := append(nlattr(unix.IFLA_XDP_FD, u32(uint32(int32(fd)))), nlattr(unix.IFLA_XDP_FLAGS, u32(flags))...)
	body = append(body, nlattr(unix.IFLA_XDP|unix.NLA_F_NESTED, nested)...)
	_, err := rtnetlink(unix.RTM_SETLINK, unix.NLM_F_ACK, body)
	return err
}

// TestForeignProgramIsRefused: an interface that already has an XDP
// program, however it was attached and in whichever mode, is refused with
// a clear error, the program is left alone, and nothing of ours stays.
func TestForeignProgramIsRefused(t *testing.T) {
	p := newPair(t)
	foreign := trivialXDP(t)
	info, err := foreign.Info()
	if err != nil {
		t.Fatal(err)
	}
	foreignID, _ := info.ID()
	baseline := func() *bpftest.Baseline {
		t.Helper()
		base, err := bpftest.NewBaseline()
		if err != nil {
			t.Fatal(err)
		}
		return base
	}

	for _, tc := range []struct {
		name     string
		attach   func() (detach func())
		wantMode string
	}{
		{"link generic", func() func() { return attachForeignLink(t, p, foreign, link.XDPGenericMode) }, ModeGeneric},
		{"link native", func() func() { return attachForeignLink(t, p, foreign, link.XDPDriverMode) }, ModeNative},
		{"netlink generic", func() func() { return attachForeignNetlink(t, p, foreign, unix.XDP_FLAGS_SKB_MODE) }, ModeGeneric},
		{"netlink native", func() func() { return attachForeignNetlink(t, p, foreign, unix.XDP_FLAGS_DRV_MODE) }, ModeNative},
	} {
		t.Run(tc.name, func(t *testing.T) {
			detach := tc.attach()
			defer detach()
			base := baseline()
			for _, mode := range []string{ModeAuto, ModeNative, ModeGeneric} {
				_, err := openIn(t, p.b, Config{Interfaces: []string{p.vb.Name}, Mode: mode})
				if !errors.Is(err, ErrForeignProgram) {
					t.Fatalf("mode %s: Open = %v, want ErrForeignProgram", mode, err)
				}
				for _, want := range []string{fmt.Sprintf("interface %q", p.vb.Name), "tokenwire did not attach",
					fmt.Sprintf("program id %d", foreignID), `name "foreign"`, tc.wantMode + " mode", "refusing to replace it"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("mode %s: error %q does not say %q", mode, err, want)
					}
				}
			}
			if ids := xdpOn(t, p.b, p.vb); len(ids) != 1 || ids[0] != int(foreignID) {
				t.Errorf("after the refusals the interface has %v, want the foreign program %d", ids, foreignID)
			}
			if left, err := base.WaitGone(2 * time.Second); err != nil || !left.Empty() {
				t.Errorf("a refused Open left %v (%v)", left, err)
			}
		})
	}
	if ids := xdpOn(t, p.b, p.vb); len(ids) != 0 {
		t.Fatalf("foreign programs not detached by the test: %v", ids)
	}

	t.Run("another tokenwire", func(t *testing.T) {
		first, err := openIn(t, p.b, Config{Interfaces: []string{p.vb.Name}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = openIn(t, p.b, Config{Interfaces: []string{p.vb.Name}, Mode: ModeGeneric})
		if !errors.Is(err, ErrForeignProgram) || !strings.Contains(err.Error(), "already has a tokenwire XDP filter") {
			t.Errorf("second filter on one interface: %v", err)
		}
		if _, err := first.Counters(); err != nil {
			t.Errorf("first filter after the refusal: %v", err)
		}
		first.Close()
	})

	t.Run("second interface occupied", func(t *testing.T) {
		// lo first, then the occupied veth: lo must be detached again.
		detach := attachForeignLink(t, p, foreign, link.XDPGenericMode)
		defer detach()
		base := baseline()
		_, err := openIn(t, p.b, Config{Interfaces: []string{"lo", p.vb.Name}})
		if !errors.Is(err, ErrForeignProgram) {
			t.Fatalf("Open = %v, want ErrForeignProgram", err)
		}
		if ids := xdpOn(t, p.b, p.b.Link(t, "lo")); len(ids) != 0 {
			t.Errorf("lo kept XDP programs %v after the failed Open", ids)
		}
		if left, err := base.WaitGone(2 * time.Second); err != nil || !left.Empty() {
			t.Errorf("a failed Open left %v (%v)", left, err)
		}
	})
}

func attachForeignLink(t *testing.T, p *pair, prog *ebpf.Program, mode link.XDPAttachFlags) func() {
	t.Helper()
	var (
		l   link.Link
		err error
	)
	p.b.Do(t, func() { l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: p.vb.Index, Flags: mode}) })
	if err != nil {
		t.Fatal(err)
	}
	return func() { l.Close() }
}

func attachForeignNetlink(t *testing.T, p *pair, prog *ebpf.Program, flags uint32) func() {
	t.Helper()
	var err error
	p.b.Do(t, func() { err = attachLegacy(p.vb.Index, prog.FD(), flags) })
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		p.b.Do(t, func() { err = attachLegacy(p.vb.Index, -1, flags) })
		if err != nil {
			t.Errorf("detaching the foreign program: %v", err)
		}
	}
}
