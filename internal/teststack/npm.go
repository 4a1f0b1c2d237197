package teststack

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The servers' sources, and the Node packages the express server needs.
//
//go:embed servers/stream_server.py servers/asgi_common.py servers/stream_server.js servers/stream_client.js servers/stream_client.py node/package.json node/package-lock.json
var files embed.FS

// NPMDirEnv names the directory for the Node packages instead of the
// default: _build/npm of this module when the tests run inside it (where
// `make deps` installs them), else the user cache directory.
const NPMDirEnv = "TOKENWIRE_NPM_DIR"

var npmOnce struct {
	sync.Mutex
	dir string
}

// NodeModules returns the node_modules directory that holds express,
// installing node/package-lock.json there with `npm ci` when it is not
// installed yet or is older than the lock file. A file lock keeps
// concurrent test binaries from installing at once.
func NodeModules() (string, error) {
	npmOnce.Lock()
	defer npmOnce.Unlock()
	if npmOnce.dir != "" {
		return npmOnce.dir, nil
	}
	dir, err := npmDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	want, _ := files.ReadFile("node/package-lock.json")
	have, _ := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	_, err = os.Stat(filepath.Join(dir, "node_modules", "express", "package.json"))
	if err != nil || !bytes.Equal(want, have) {
		if err := npmInstall(dir); err != nil {
			return "", err
		}
	}
	npmOnce.dir = filepath.Join(dir, "node_modules")
	return npmOnce.dir, nil
}

func npmInstall(dir string) error {
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, _ := files.ReadFile("node/" + name)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("express is not installed in %s and npm is missing: %w", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, npm, "ci", "--prefix", dir, "--no-audit", "--no-fund").CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm ci --prefix %s: %v: %s", dir, err, lastLine(out))
	}
	return nil
}

// npmDir is where the Node packages go.
func npmDir() (string, error) {
	if d := os.Getenv(NPMDirEnv); d != "" {
		return filepath.Abs(d)
	}
	if root := moduleRoot(); root != "" {
		return filepath.Join(root, "_build", "npm"), nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "tokenwire", "npm"), nil
}

// moduleRoot is the directory of this module's go.mod above the working
// directory (go test runs in the package's directory), "" outside it.
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/tokenwire/tokenwire\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
