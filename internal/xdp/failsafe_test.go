package xdp

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// childEnv makes the test binary act as a collector that attaches the
// filter and waits to be killed (see TestMain): "<interface>,<blocked CIDR>".
const childEnv = "TOKENWIRE_XDP_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	os.Exit(m.Run())
}

// childFilter holds the child's filter for the life of the process: a
// filter only referenced from a local would be unreachable once the child
// blocks, and the collector of unreachable file descriptors would detach
// it before the test kills the child.
var childFilter *Filter

// childMain attaches the filter in the current network namespace, says so
// on stdout and blocks until killed: the links live only as long as this
// process does.
func childMain(spec string) int {
	iface, blocked, _ := strings.Cut(spec, ",")
	f, err := Open(Config{Interfaces: []string{iface}, Blocklist: []string{blocked}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	childFilter = f
	fmt.Printf("attached %s\n", f.Attachments()[0].Mode)
	// Sleep rather than select {}: a process whose only goroutine blocks
	// forever on nothing is killed by the runtime ("all goroutines are
	// asleep - deadlock!"), which would detach the filter early, with
	// no SIGKILL, while the test still expects it in place.
	for {
		time.Sleep(time.Hour)
	}
}

// TestFailOpenWhenTheOwnerDies: a process that attached the filter is
// killed with SIGKILL (no Close, no cleanup of any kind). The kernel drops
// its links with its file descriptors, the program detaches, and traffic
// from the blocked source passes again.
func TestFailOpenWhenTheOwnerDies(t *testing.T) {
	p := newPair(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", p.b.Name, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+p.vb.Name+",192.0.2.3")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	select {
	case line, ok := <-lines:
		if !ok || !strings.HasPrefix(line, "attached") {
			t.Fatalf("child: %q (exited: %v)", line, !ok)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not attach within 30 s")
	}

	ids := xdpOn(t, p.b, p.vb)
	if len(ids) != 1 {
		t.Fatalf("XDP programs on %s with the child running: %v", p.vb.Name, ids)
	}
	if prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(ids[0])); err == nil {
		info, _ := prog.Info()
		prog.Close()
		if info == nil || info.Name != "tw_xdp_filter" {
			t.Fatalf("the attached program is %+v, not the child's filter", info)
		}
	}

	blockedSrc, okSrc := p.sender(t, addrA3), p.sender(t, addrA1)
	blockedSrc.send(t, 20)
	okSrc.send(t, 20)
	waitFor(t, "the unblocked packets", func() bool { return p.sink.count(addrA1) == 20 })
	time.Sleep(50 * time.Millisecond)
	if n := p.sink.count(addrA3); n != 0 {
		t.Fatalf("%d packets from the blocked source arrived while the child ran", n)
	}

	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	<-lines
	waitFor(t, "the program to detach after the owner died", func() bool { return len(xdpOn(t, p.b, p.vb)) == 0 })
	blockedSrc.send(t, 20)
	waitFor(t, "traffic from the formerly blocked source", func() bool { return p.sink.count(addrA3) == 20 })
}
