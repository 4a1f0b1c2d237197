package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sendResult is what the sender prints (JSON) when the flood ends.
type sendResult struct {
	Sent     uint64  // frames the kernel took and handed to the veth
	Rejected uint64  // transmit attempts the kernel refused (veth ring full: ENOBUFS); retried
	CPUNs    uint64  // CPU time of the writer threads during the flood
	Seconds  float64 // flood time
	Syscalls uint64  // send calls made
}

// runSend is the "send" subcommand, run inside twb-snd: it sets up its
// sockets, prints "ready", waits for a line on stdin, floods for the given
// time and prints a sendResult.
func runSend(args []string) error {
	fs := flag.NewFlagSet("send", flag.ExitOnError)
	dur := fs.Duration("duration", 3*time.Second, "flood time")
	dstMAC := fs.String("dst-mac", "", "destination MAC (the receiving veth end)")
	tx := fs.String("tx", "ring", "ring: PACKET_TX_RING, many frames per syscall; write: one write(2) per frame")
	cpus := fs.String("cpus", "", "comma-separated CPUs, one writer thread pinned to each")
	batch := fs.Int("batch", 256, "frames per send call (ring)")
	fs.Parse(args)
	ifi, err := net.InterfaceByName(ifSnd)
	if err != nil {
		return err
	}
	dst, err := net.ParseMAC(*dstMAC)
	if err != nil {
		return err
	}
	var cpuList []int
	for _, c := range strings.Split(*cpus, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil {
			return fmt.Errorf("-cpus %q: %w", *cpus, err)
		}
		cpuList = append(cpuList, n)
	}
	frame := buildFrame(ifi.HardwareAddr, dst, net.ParseIP(ipSnd).To4(), net.ParseIP(ipRcv).To4())

	type worker struct {
		fd   int
		ring *txRing
	}
	var ws []worker
	defer func() {
		for _, w := range ws {
			if w.ring != nil {
				w.ring.close()
			}
			unix.Close(w.fd)
		}
	}()
	for range cpuList {
		fd, err := packetSocket(ifi.Index, dst)
		if err != nil {
			return err
		}
		w := worker{fd: fd}
		ws = append(ws, w)
		if *tx == "ring" {
			r, err := newTxRing(fd, frame, 8**batch)
			if err != nil {
				return err
			}
			ws[len(ws)-1].ring = r
		} else if *tx != "write" {
			return fmt.Errorf("-tx %q: ring or write", *tx)
		}
	}

	var (
		res      sendResult
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		ready    sync.WaitGroup
		start    = make(chan struct{})
		deadline time.Time // written before start is closed
	)
	for i, w := range ws {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			// The thread stays locked and pinned until it exits: its
			// schedstat is then this worker's CPU time and nothing else's.
			runtime.LockOSThread()
			var set unix.CPUSet
			set.Set(cpuList[i])
			err := unix.SchedSetaffinity(0, &set)
			ready.Done()
			<-start
			c0, _ := schedNs(unix.Gettid())
			var r sendResult
			if err == nil {
				if w.ring != nil {
					r, err = w.ring.flood(deadline, *batch)
				} else {
					r, err = writeFlood(w.fd, frame, deadline)
				}
			}
			c1, _ := schedNs(unix.Gettid())
			mu.Lock()
			defer mu.Unlock()
			res.Sent += r.Sent
			res.Rejected += r.Rejected
			res.Syscalls += r.Syscalls
			res.CPUNs += c1 - c0
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	ready.Wait()
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	t0 := time.Now()
	deadline = t0.Add(*dur)
	close(start)
	wg.Wait()
	res.Seconds = time.Since(t0).Seconds()
	if firstErr != nil {
		return firstErr
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// packetSocket opens a send-only AF_PACKET socket bound to the interface.
// PACKET_QDISC_BYPASS hands frames straight to the driver (dev_direct_xmit):
// no qdisc, no tc egress, so the sender's cost is the socket, the skb and
// veth_xmit only.
func packetSocket(ifindex int, dst net.HardwareAddr) (int, error) {
	// Protocol 0: no receive hook, so replies are not queued to us.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("PACKET_QDISC_BYPASS: %w", err)
	}
	// A send buffer far above the veth's queues, so that the limit the
	// sender meets is the receiver (ENOBUFS), not its own socket.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 16<<20); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("SO_SNDBUFFORCE: %w", err)
	}
	sa := &unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}
	copy(sa.Addr[:], dst)
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// writeFlood sends one frame per write(2): the simple sender, for
// comparison (a syscall per frame costs microseconds in a VM).
func writeFlood(fd int, frame []byte, deadline time.Time) (sendResult, error) {
	var r sendResult
	for time.Now().Before(deadline) {
		// Check the clock every 256 frames: bounded in time.
		for range 256 {
			r.Syscalls++
			if _, err := unix.Write(fd, frame); err == nil {
				r.Sent++
			} else if errors.Is(err, unix.ENOBUFS) {
				r.Rejected++
			} else {
				return r, err
			}
		}
	}
	return r, nil
}

// txRing is a TPACKET_V2 transmit ring whose frames all hold the same
// pre-built packet: sending is flipping frame status words to
// SEND_REQUEST and one sendto(2) per batch, which makes the kernel
// transmit every requested frame in one call.
type txRing struct {
	fd      int
	mem     []byte
	frameSz int
	n       int // frames
	next    int // next frame to request
}

// TPACKET_V2 layout constants (linux/if_packet.h).
const (
	tpStatusAvailable   = 0
	tpStatusSendRequest = 1
	tpStatusWrongFormat = 4
	// Frame data starts after the tpacket2_hdr (32 bytes, TPACKET_ALIGNed)
	// when PACKET_TX_HAS_OFF is not set: TPACKET2_HDRLEN - sizeof(sockaddr_ll).
	tpacket2DataOff = 32
)

func newTxRing(fd int, frame []byte, frames int) (*txRing, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return nil, fmt.Errorf("TPACKET_V2: %w", err)
	}
	const blockSz = 1 << 16
	frameSz := 128
	for frameSz < tpacket2DataOff+len(frame) {
		frameSz *= 2
	}
	perBlock := blockSz / frameSz
	blocks := (frames + perBlock - 1) / perBlock
	req := unix.TpacketReq{Block_size: blockSz, Block_nr: uint32(blocks), Frame_size: uint32(frameSz), Frame_nr: uint32(blocks * perBlock)}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_TX_RING, &req); err != nil {
		return nil, fmt.Errorf("PACKET_TX_RING: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, blockSz*blocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap TX ring: %w", err)
	}
	r := &txRing{fd: fd, mem: mem, frameSz: frameSz, n: int(req.Frame_nr)}
	for i := range r.n {
		f := r.frame(i)
		// struct tpacket2_hdr: tp_status u32, tp_len u32, tp_snaplen u32, ...
		binary.NativeEndian.PutUint32(f[4:], uint32(len(frame)))
		binary.NativeEndian.PutUint32(f[8:], uint32(len(frame)))
		copy(f[tpacket2DataOff:], frame)
	}
	return r, nil
}

func (r *txRing) frame(i int) []byte { return r.mem[i*r.frameSz : (i+1)*r.frameSz] }

// status is the frame's tp_status word, shared with the kernel: accessed
// atomically so neither the compiler nor the CPU reorders it with the data.
func (r *txRing) status(i int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[i*r.frameSz])) }

func (r *txRing) close() { unix.Munmap(r.mem) }

// flood requests batch frames at a time and sends them with a
// non-blocking sendto, until deadline. sendto hands every requested frame
// to the driver and returns; a frame's status goes back to AVAILABLE when
// the receiver frees its skb (it stays SENDING until then). A frame the
// veth could not take (its NAPI ring or the backlog queue full: the
// receiver is the bottleneck) makes sendto fail with ENOBUFS and stays
// requested, so it is retried: the sender keeps the receiver saturated.
func (r *txRing) flood(deadline time.Time, batch int) (sendResult, error) {
	var res sendResult
	batch = min(batch, r.n/4) // keep most of the ring free for frames in flight
	var requested uint64
	pending := 0
flood:
	for time.Now().Before(deadline) {
		first := r.next
		for k := range batch {
			st := r.status((first + k) % r.n)
			// Still in flight from a lap ago: wait for the receiver to
			// free it (rare: the ring holds more than the veth queues).
			for atomic.LoadUint32(st) != tpStatusAvailable {
				if !time.Now().Before(deadline) {
					break flood
				}
				runtime.Gosched()
			}
			atomic.StoreUint32(st, tpStatusSendRequest)
		}
		r.next = (first + batch) % r.n
		requested += uint64(batch)
		for {
			res.Syscalls++
			_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(r.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
			switch e {
			case 0, unix.EAGAIN:
			case unix.ENOBUFS:
				res.Rejected++
			default:
				return res, fmt.Errorf("sendto on TX ring: %w", e)
			}
			pending = 0
			for k := range batch {
				switch atomic.LoadUint32(r.status((first + k) % r.n)) {
				case tpStatusSendRequest:
					pending++
				case tpStatusWrongFormat:
					return res, errors.New("TX ring: kernel rejected the frame format")
				}
			}
			// Bounded: gives up on the batch at the deadline.
			if pending == 0 || !time.Now().Before(deadline) {
				break
			}
		}
	}
	res.Sent = requested - uint64(pending)
	return res, nil
}

// buildFrame returns a minimum-size (60-byte) Ethernet/IPv4/UDP frame.
func buildFrame(src, dst net.HardwareAddr, sip, dip net.IP) []byte {
	f := make([]byte, 60)
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:], unix.ETH_P_IP)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], 20+8+18) // total length: 18 bytes of payload
	ip[8] = 64
	ip[9] = unix.IPPROTO_UDP
	copy(ip[12:16], sip)
	copy(ip[16:20], dip)
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:42]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 9) // discard
	binary.BigEndian.PutUint16(udp[4:], 8+18)
	return f
}
