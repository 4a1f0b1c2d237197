package teststack

import (
	"bytes"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SendMode is one way an application hands a socket its bytes. A probe
// that reads what a write carried from the syscall's own arguments must
// give the same stream for each.
type SendMode string

const (
	ModeWrite   SendMode = "write"
	ModeWritev  SendMode = "writev"
	ModeSendto  SendMode = "sendto"
	ModeSendmsg SendMode = "sendmsg"
)

// sendOnce makes one syscall of the given mode and returns the bytes it
// took: possibly fewer than offered on a non-blocking socket.
func sendOnce(fd int, mode SendMode, parts [][]byte) (int, error) {
	switch mode {
	case ModeWrite:
		return unix.Write(fd, parts[0])
	case ModeSendto:
		p := parts[0]
		n, _, errno := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	case ModeWritev:
		return unix.Writev(fd, parts)
	case ModeSendmsg:
		return unix.SendmsgBuffers(fd, parts, nil, nil, 0)
	}
	return 0, fmt.Errorf("unknown mode %q", mode)
}

// SendAll writes parts (iovecs for writev and sendmsg; write and sendto
// get them joined) with one mode until all is taken, waiting for the
// socket to drain between partial writes. It returns the number of
// syscalls.
func SendAll(c *net.TCPConn, mode SendMode, parts [][]byte) (int, error) {
	if mode == ModeWrite || mode == ModeSendto {
		parts = [][]byte{bytes.Join(parts, nil)}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	calls := 0
	for len(parts) > 0 {
		var n int
		var serr error
		if err := rc.Write(func(fd uintptr) bool {
			n, serr = sendOnce(int(fd), mode, parts)
			return serr != unix.EAGAIN
		}); err != nil {
			return calls, err
		}
		if serr != nil {
			return calls, serr
		}
		calls++
		for n > 0 { // drop what was taken
			if n >= len(parts[0]) {
				n -= len(parts[0])
				parts = parts[1:]
			} else {
				parts[0] = parts[0][n:]
				n = 0
			}
		}
		for len(parts) > 0 && len(parts[0]) == 0 {
			parts = parts[1:]
		}
	}
	return calls, nil
}
