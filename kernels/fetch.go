package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Kernel is a pinned kernel, downloaded, verified and unpacked in the cache.
type Kernel struct {
	Pin
	Vmlinuz string // path of boot/vmlinuz-* in the cache
	Config  string // path of boot/config-*, "" if the package has none
}

// Fetch makes sure the pinned package is in cacheDir with the pinned
// SHA256 and unpacked, downloading it with curl when it is not. The package
// is checked on every run (a cache can be corrupted or edited), the unpacked
// tree only by a marker written after a complete unpack.
func Fetch(ctx context.Context, p Pin, pinsPath, cacheDir string, log io.Writer) (Kernel, error) {
	k := Kernel{Pin: p}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return k, err
	}
	deb := filepath.Join(cacheDir, path.Base(p.URL))
	sum, err := fileSHA256(deb)
	if err != nil || sum != p.SHA256 {
		if err == nil {
			fmt.Fprintf(log, "kernels: %s: cached %s has sha256 %s, downloading again\n", p.Name, deb, sum)
		}
		if err := download(ctx, p, pinsPath, deb, log); err != nil {
			return k, err
		}
	}
	// The unpacked tree is named by the package's hash, so a changed pin
	// never reuses the tree of another package.
	tree := filepath.Join(cacheDir, p.Name+"-"+p.SHA256[:16])
	if _, err := os.Stat(filepath.Join(tree, ".complete")); err != nil {
		if err := unpack(ctx, deb, tree); err != nil {
			return k, fmt.Errorf("kernel pin %s: unpacking %s: %w", p.Name, deb, err)
		}
	}
	vmlinuz, _ := filepath.Glob(filepath.Join(tree, "boot", "vmlinuz-*"))
	if len(vmlinuz) != 1 {
		return k, fmt.Errorf("kernel pin %s: %s holds %d boot/vmlinuz-* files, want 1: is the url a linux-image package?", p.Name, p.URL, len(vmlinuz))
	}
	k.Vmlinuz = vmlinuz[0]
	if cfg, _ := filepath.Glob(filepath.Join(tree, "boot", "config-*")); len(cfg) == 1 {
		k.Config = cfg[0]
	}
	return k, nil
}

// download fetches the package to a temporary name and renames it only
// once its hash matches the pin.
func download(ctx context.Context, p Pin, pinsPath, dst string, log io.Writer) error {
	fmt.Fprintf(log, "kernels: %s: downloading %s\n", p.Name, p.URL)
	part := dst + ".part"
	defer os.Remove(part)
	if err := fetchURL(ctx, p.URL, part); err != nil {
		return fmt.Errorf("kernel pin %s: downloading %s failed (%v): the package has probably left the Debian pool; update url, version and sha256 of %q in %s",
			p.Name, p.URL, err, p.Name, pinsPath)
	}
	sum, err := fileSHA256(part)
	if err != nil {
		return err
	}
	if sum != p.SHA256 {
		return fmt.Errorf("kernel pin %s: %s has sha256 %s, the pin says %s: update the pin %q in %s (only after checking where the new package comes from)",
			p.Name, p.URL, sum, p.SHA256, p.Name, pinsPath)
	}
	return os.Rename(part, dst)
}

// fetchURL downloads url to file; a variable so that tests can serve
// packages without a network.
var fetchURL = func(ctx context.Context, url, file string) error {
	cmd := exec.CommandContext(ctx, "curl", "--fail", "--silent", "--show-error", "--location",
		"--retry", "3", "--connect-timeout", "30", "--max-time", "900", "--output", file, url)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("curl: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unpack extracts the package with dpkg-deb and keeps only boot/: the
// modules are not needed (the guests use loopback only) and are most of
// the package's size.
func unpack(ctx context.Context, deb, tree string) error {
	if err := os.RemoveAll(tree); err != nil {
		return err
	}
	tmp := tree + ".tmp"
	os.RemoveAll(tmp)
	defer os.RemoveAll(tmp)
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, tmp).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x: %v: %s", err, out)
	}
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(tmp, "boot"), filepath.Join(tree, "boot")); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(tree, ".complete"), nil, 0o644)
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
