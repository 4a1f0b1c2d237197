package teststack

import (
	"bytes"
	"fmt"
	"net"
	"time"
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

// BlockingWrite writes p to c in one blocking write(2), as a
// thread-per-connection server does (cpp-httplib's, which llama.cpp
// serves with; Python's socketserver): the syscall returns once the
// kernel has queued every byte, however long the peer takes to read.
// It returns the bytes written; fewer than len(p) only if a signal cut
// the wait short.
func BlockingWrite(c *net.TCPConn, p []byte) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var werr error
	if err := rc.Control(func(fd uintptr) {
		if werr = unix.SetNonblock(int(fd), false); werr != nil {
			return
		}
		n, werr = unix.Write(int(fd), p)
		if err := unix.SetNonblock(int(fd), true); werr == nil {
			werr = err
		}
	}); err != nil {
		return 0, err
	}
	return n, werr
}

// AwaitUnread waits until at least n bytes wait unread in c's receive
// queue, polling every millisecond up to timeout.
func AwaitUnread(c *net.TCPConn, n int, timeout time.Duration) error {
	return pollSocket(c, timeout, func(fd int) (string, error) {
		unread, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		if err != nil || unread >= n {
			return "", err
		}
		return fmt.Sprintf("%d bytes unread, want %d", unread, n), nil
	})
}

// TCP states of the kernel's include/net/tcp_states.h, as TCP_INFO
// reports them.
const (
	tcpClose     = 7
	tcpCloseWait = 8
)

// AwaitPeerClose waits until c's peer has closed its end, its FIN taken
// (the socket in CLOSE_WAIT), polling every millisecond up to timeout:
// for a test that must leave bytes unread until then.
func AwaitPeerClose(c *net.TCPConn, timeout time.Duration) error {
	return awaitTCPState(c, tcpCloseWait, "CLOSE_WAIT", timeout)
}

// AwaitReset waits until c's connection is closed under it, by the peer's
// reset (the socket in CLOSE), polling every millisecond up to timeout.
func AwaitReset(c *net.TCPConn, timeout time.Duration) error {
	return awaitTCPState(c, tcpClose, "CLOSE", timeout)
}

// awaitTCPState waits until c's socket is in the TCP state want (named
// name), polling every millisecond up to timeout.
func awaitTCPState(c *net.TCPConn, want uint8, name string, timeout time.Duration) error {
	return pollSocket(c, timeout, func(fd int) (string, error) {
		info, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil || info.State == want {
			return "", err
		}
		return fmt.Sprintf("TCP state %d, want %s (%d)", info.State, name, want), nil
	})
}

// pollSocket calls check on c's descriptor every millisecond until it
// reports nothing left to wait for (""), fails, or timeout passes.
func pollSocket(c *net.TCPConn, timeout time.Duration, check func(fd int) (waiting string, err error)) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		var waiting string
		var cerr error
		if err := rc.Control(func(fd uintptr) { waiting, cerr = check(int(fd)) }); err != nil {
			return err
		}
		if cerr != nil || waiting == "" {
			return cerr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s, after %v", waiting, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}
