package tokenwirereceiver

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/tokenwire/tokenwire/internal/bpftest"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// unprivilegedChild makes this test binary, started by
// TestStartWithoutPrivileges under another user, try one Start and print
// its error instead of running tests.
const unprivilegedChild = "TOKENWIRE_UNPRIVILEGED_CHILD"

func init() {
	if os.Getenv(unprivilegedChild) != "1" {
		return
	}
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type),
		createDefaultConfig(), new(consumertest.MetricsSink))
	if err == nil {
		err = r.Start(context.Background(), componenttest.NewNopHost())
		_ = r.Shutdown(context.Background())
	}
	fmt.Printf("start error: %v\n", err)
	os.Exit(0)
}

// TestStartWithoutPrivileges starts the receiver as an unprivileged user
// (setpriv, no capabilities): Start must fail, naming what is missing and
// how to run it.
func TestStartWithoutPrivileges(t *testing.T) {
	bpftest.Require(t) // root, to switch to another user
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	copyTo := filepath.Join(dir, "receiver.test")
	src, err := os.Open(exe)
	require.NoError(t, err)
	defer src.Close()
	dst, err := os.OpenFile(copyTo, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())

	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", copyTo)
	cmd.Env = append(os.Environ(), unprivilegedChild+"=1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "start error: tokenwire cannot load its BPF programs: missing capabilities CAP_BPF, CAP_PERFMON: run the collector as root")
}
