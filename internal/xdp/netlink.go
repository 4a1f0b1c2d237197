package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A tiny rtnetlink client: enough to ask which XDP programs an interface
// has (RTM_GETLINK, IFLA_XDP). cilium/ebpf v0.22 has no XDP query
// (BPF_PROG_QUERY does not cover XDP), and relying on link creation failing
// with EBUSY/EEXIST cannot tell whose program is there or in which mode.

// xdpMode is a mode an XDP program can be attached in (XDP_ATTACHED_*).
type xdpMode uint8

const (
	xdpAttachedNone xdpMode = 0
	xdpAttachedDrv  xdpMode = 1
	xdpAttachedSKB  xdpMode = 2
	xdpAttachedHW   xdpMode = 3
)

func (m xdpMode) String() string {
	switch m {
	case xdpAttachedDrv:
		return ModeNative
	case xdpAttachedSKB:
		return ModeGeneric
	case xdpAttachedHW:
		return "offload"
	}
	return "none"
}

// xdpProgram is one program attached to an interface.
type xdpProgram struct {
	ID   uint32
	Mode xdpMode
}

// queryXDP lists the XDP programs attached to the interface with index
// ifindex, in the calling thread's network namespace.
func queryXDP(ifindex int) ([]xdpProgram, error) {
	req := make([]byte, unix.SizeofIfInfomsg)
	ifi := (*unix.IfInfomsg)(unsafe.Pointer(&req[0]))
	ifi.Family = unix.AF_UNSPEC
	ifi.Index = int32(ifindex)
	msgs, err := rtnetlink(unix.RTM_GETLINK, 0, req)
	if err != nil {
		return nil, fmt.Errorf("netlink RTM_GETLINK ifindex %d: %w", ifindex, err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		if int((*unix.IfInfomsg)(unsafe.Pointer(&m.Data[0])).Index) != ifindex {
			continue
		}
		xdp := findAttr(m.Data[unix.SizeofIfInfomsg:], unix.IFLA_XDP)
		if xdp == nil {
			return nil, nil
		}
		var progs []xdpProgram
		for _, m := range []struct {
			mode xdpMode
			attr uint16
		}{
			{xdpAttachedSKB, unix.IFLA_XDP_SKB_PROG_ID},
			{xdpAttachedDrv, unix.IFLA_XDP_DRV_PROG_ID},
			{xdpAttachedHW, unix.IFLA_XDP_HW_PROG_ID},
		} {
			if v := findAttr(xdp, m.attr); len(v) >= 4 {
				progs = append(progs, xdpProgram{ID: binary.NativeEndian.Uint32(v), Mode: m.mode})
			}
		}
		return progs, nil
	}
	return nil, fmt.Errorf("netlink RTM_GETLINK ifindex %d: no answer for the interface", ifindex)
}

// findAttr returns the payload of the first netlink attribute of type typ
// in b, or nil.
func findAttr(b []byte, typ uint16) []byte {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		t := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < unix.SizeofRtAttr || l > len(b) {
			return nil
		}
		if t == typ {
			return b[unix.SizeofRtAttr:l]
		}
		l = (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if l > len(b) {
			return nil
		}
		b = b[l:]
	}
	return nil
}

// rtnetlink sends one NETLINK_ROUTE request and returns the answers,
// turning an NLMSG_ERROR into its errno. It opens its socket in the calling
// thread's network namespace.
func rtnetlink(typ, flags uint16, body []byte) ([]syscall.NetlinkMessage, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	// Bounded wait: a kernel that never answers must not hang Open.
	tv := unix.Timeval{Sec: 5}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, os.NewSyscallError("setsockopt", err)
	}
	sa := &unix.SockaddrNetlink{Family: unix.AF_NETLINK}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, os.NewSyscallError("bind", err)
	}

	const seq = 1
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	msg = append(msg, body...)
	hdr := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	hdr.Len = uint32(len(msg))
	hdr.Type = typ
	hdr.Flags = unix.NLM_F_REQUEST | flags
	hdr.Seq = seq
	if err := unix.Sendto(fd, msg, 0, sa); err != nil {
		return nil, os.NewSyscallError("sendto", err)
	}

	var out []syscall.NetlinkMessage
	buf := make([]byte, 1<<16)
	for range 1024 { // a request of ours never needs more reads
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, os.NewSyscallError("recvfrom", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, errors.New("short netlink error message")
				}
				if errno := -int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
					return nil, syscall.Errno(errno)
				}
				return out, nil // an ACK
			}
			// Copy: the next Recvfrom reuses buf.
			m.Data = append([]byte(nil), m.Data...)
			out = append(out, m)
			if m.Header.Flags&unix.NLM_F_MULTI == 0 && flags&unix.NLM_F_ACK == 0 {
				return out, nil
			}
		}
	}
	return nil, errors.New("netlink: answer did not end")
}
