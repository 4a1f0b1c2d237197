package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPinsFileIsValid(t *testing.T) {
	pins, err := LoadPins("kernels.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pins {
		if !strings.HasPrefix(p.URL, "http://deb.debian.org/debian/pool/main/l/linux/linux-image-") || !strings.Contains(p.URL, p.Version) {
			t.Errorf("%s: url %s is not a Debian linux-image package of version %s", p.Name, p.URL, p.Version)
		}
	}
}

func TestLoadPinsRejects(t *testing.T) {
	good := `{"name": "k", "distro": "D", "version": "1", "url": "http://x/k.deb", "sha256": "` + strings.Repeat("0", 64) + `"}`
	for name, body := range map[string]string{
		"no kernels":  `{"kernels": []}`,
		"short sha":   `{"kernels": [{"name": "k", "distro": "D", "version": "1", "url": "u", "sha256": "abc"}]}`,
		"twice":       `{"kernels": [` + good + `,` + good + `]}`,
		"native name": `{"kernels": [` + strings.Replace(good, `"k"`, `"native"`, 1) + `]}`,
		"no url":      `{"kernels": [` + strings.Replace(good, `"http://x/k.deb"`, `""`, 1) + `]}`,
		"bad json":    `{`,
	} {
		path := filepath.Join(t.TempDir(), "pins.json")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadPins(path); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
