//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// grace is how long a child gets to exit after SIGTERM: the collector
// detaches its BPF programs and flushes its exporters.
const grace = 15 * time.Second

// startProc starts bin as a child of the test in its own process group,
// with its output in dir/name.log; the test's cleanup stops the group (and
// fails the test if it needed SIGKILL) and prints the log's tail when the
// test failed.
func startProc(t *testing.T, dir, name string, env []string, bin string, args ...string) *teststack.Proc {
	t.Helper()
	return teststack.StartProcT(t, teststack.ProcOptions{Name: name, Dir: dir, Env: env,
		LogPath: filepath.Join(dir, name+".log"), Grace: grace}, bin, args...)
}

// waitReady fails the test unless ready succeeds within timeout while p
// runs.
func waitReady(t *testing.T, p *teststack.Proc, timeout time.Duration, what string, ready func() error) {
	t.Helper()
	if err := p.WaitReady(timeout, what, ready); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a TCP port on 127.0.0.1 that nothing listened on a
// moment ago (the kernel's choice for port 0).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// requirePortsFree fails the test when one of the fixed ports of the
// default config.yaml (or the streams port) is taken, naming who to stop:
// the e2e run uses the default configuration on purpose, ports included.
func requirePortsFree(t *testing.T, ports map[int]string) {
	t.Helper()
	var busy []string
	for port, what := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			busy = append(busy, fmt.Sprintf("%d (%s): %v", port, what, err))
			continue
		}
		l.Close()
	}
	if len(busy) > 0 {
		t.Fatalf("ports the e2e test needs are in use (is a collector from `make run` still running?):\n  %s",
			strings.Join(busy, "\n  "))
	}
}

// lookBin resolves a binary from an environment variable or a default.
func lookBin(t *testing.T, env, def, hint string) string {
	t.Helper()
	name := def
	if v := os.Getenv(env); v != "" {
		name = v
	}
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): %s", name, err, hint)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
