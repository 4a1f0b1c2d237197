package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// nativeRow names the row of this machine's own kernel, run without qemu.
const nativeRow = "native"

// RunNative runs the plan script on this machine with the same test
// binaries the guests get, from the stage directory.
func RunNative(ctx context.Context, stage, script string, limit time.Duration, logPath string, progress func(Line)) Exec {
	tmp, err := os.MkdirTemp("", "tokenwire-kernels-native-")
	if err != nil {
		return Exec{Err: err}
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	abs, err := filepath.Abs(stage)
	if err != nil {
		return Exec{Err: err}
	}
	cmd := exec.Command("sh", script, abs)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "TWK_TIMEOUT=timeout --foreground")
	return streamCmd(ctx, cmd, logPath, progress)
}
