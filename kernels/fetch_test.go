package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildDeb makes a package holding boot/vmlinuz-<v> with dpkg-deb, part
// of dpkg and so of every Debian system.
func buildDeb(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for name, body := range map[string]string{
		"DEBIAN/control":      "Package: linux-image-test\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@example.org>\nDescription: test\n",
		"boot/vmlinuz-1-test": "not a kernel",
		"boot/config-1-test":  "CONFIG_BPF=y\n",
		"lib/modules/1/x.ko":  "module",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "k.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -b: %v: %s", err, out)
	}
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestFetch(t *testing.T) {
	deb := buildDeb(t)
	sum := sha256.Sum256(deb)
	pin := Pin{Name: "test", Distro: "D", Version: "1", URL: "http://deb.example/pool/k_1_amd64.deb", SHA256: hex.EncodeToString(sum[:])}
	serve := deb
	calls := 0
	orig := fetchURL
	t.Cleanup(func() { fetchURL = orig })
	fetchURL = func(_ context.Context, url, file string) error {
		calls++
		if serve == nil {
			return errors.New("404 Not Found")
		}
		return os.WriteFile(file, serve, 0o644)
	}
	cache := t.TempDir()

	k, err := Fetch(context.Background(), pin, "kernels/kernels.json", cache, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(k.Vmlinuz) != "vmlinuz-1-test" || filepath.Base(k.Config) != "config-1-test" || calls != 1 {
		t.Fatalf("kernel %+v after %d downloads", k, calls)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(k.Vmlinuz)), "lib")); !os.IsNotExist(err) {
		t.Errorf("the modules were kept in the cache: %v", err)
	}
	if _, err := Fetch(context.Background(), pin, "kernels/kernels.json", cache, io.Discard); err != nil || calls != 1 {
		t.Errorf("second fetch: %v, %d downloads (want the cache)", err, calls)
	}

	// A package that changed upstream: the error names the pin to update.
	other := pin
	other.Name, other.URL = "changed", "http://deb.example/pool/k_2_amd64.deb"
	serve = append([]byte(nil), deb...)
	serve[len(serve)-1] ^= 1
	_, err = Fetch(context.Background(), other, "kernels/kernels.json", cache, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `update the pin "changed" in kernels/kernels.json`) || !strings.Contains(err.Error(), "kernel pin changed:") {
		t.Errorf("checksum mismatch: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "k_2_amd64.deb")); !os.IsNotExist(err) {
		t.Errorf("a package with the wrong hash was kept: %v", err)
	}

	// A package gone from the pool.
	serve = nil
	other.Name = "gone"
	_, err = Fetch(context.Background(), other, "kernels/kernels.json", cache, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `update url, version and sha256 of "gone" in kernels/kernels.json`) {
		t.Errorf("failed download: %v", err)
	}
}
