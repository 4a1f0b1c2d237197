package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
)

// Pin is one kernel of the matrix: a Debian kernel package fixed by URL and
// SHA256, so every run boots byte-for-byte the same kernel.
type Pin struct {
	Name    string `json:"name"`    // short row name, e.g. debian12
	Distro  string `json:"distro"`  // e.g. Debian 12 bookworm
	Version string `json:"version"` // Debian package version, e.g. 6.1.176-1
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
}

type pinFile struct {
	About   string `json:"about"`
	Kernels []Pin  `json:"kernels"`
}

var (
	pinNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
	sha256RE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// LoadPins reads and checks the pin file (kernels/kernels.json).
func LoadPins(path string) ([]Pin, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f pinFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Kernels) == 0 {
		return nil, fmt.Errorf("%s: no kernels", path)
	}
	seen := map[string]bool{}
	for _, p := range f.Kernels {
		switch {
		case !pinNameRE.MatchString(p.Name):
			return nil, fmt.Errorf("%s: kernel name %q: want lower-case letters, digits, . _ -", path, p.Name)
		case p.Name == nativeRow:
			return nil, fmt.Errorf("%s: kernel name %q is taken by the native row", path, p.Name)
		case seen[p.Name]:
			return nil, fmt.Errorf("%s: kernel %q listed twice", path, p.Name)
		case p.URL == "" || p.Version == "" || p.Distro == "":
			return nil, fmt.Errorf("%s: kernel %q needs distro, version and url", path, p.Name)
		case !sha256RE.MatchString(p.SHA256):
			return nil, fmt.Errorf("%s: kernel %q: sha256 must be 64 lower-case hex digits", path, p.Name)
		}
		seen[p.Name] = true
	}
	return f.Kernels, nil
}
