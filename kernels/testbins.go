package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Package is a Go package whose tests load BPF programs.
type Package struct {
	ImportPath string
	Dir        string // relative to the module root, slash-separated
	Binary     string // name of its test binary, e.g. stream.test
	Capability string // its matrix column
}

// capabilities names the matrix column of the known BPF packages; any
// other package that calls bpftest.Require gets a column named after its
// directory, so a new one is tested without editing this program.
var capabilities = map[string]string{
	"internal/stream":            "stream",
	"internal/handshake":         "handshake",
	"internal/xdp":               "xdp",
	"receiver/tokenwirereceiver": "receiver",
}

// bpfTestMarkers are the calls that make a package's tests need BPF.
var bpfTestMarkers = []string{"bpftest.Require", "bpftest.VethPair"}

// DiscoverPackages lists the packages of the module rooted at root whose
// test files call bpftest.Require (or RequireTracefs, or VethPair), sorted
// with the known capabilities first in a fixed order.
func DiscoverPackages(ctx context.Context, root string) ([]Package, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{join .TestGoFiles \" \"}} {{join .XTestGoFiles \" \"}}", "./...")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	var pkgs []Package
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) != 3 {
			continue
		}
		rel, err := filepath.Rel(absRoot, f[1])
		if err != nil || rel == "kernels" { // this program's own tests mention the markers
			continue
		}
		uses, err := testsUseBPF(f[1], strings.Fields(f[2]))
		if err != nil {
			return nil, err
		}
		if !uses {
			continue
		}
		rel = filepath.ToSlash(rel)
		c, ok := capabilities[rel]
		if !ok {
			c = filepath.Base(rel)
		}
		pkgs = append(pkgs, Package{ImportPath: f[0], Dir: rel, Binary: filepath.Base(rel) + ".test", Capability: c})
	}
	order := []string{"stream", "handshake", "xdp", "receiver"}
	rank := func(p Package) int {
		if i := slices.Index(order, p.Capability); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(pkgs, func(a, b Package) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.Dir, b.Dir)
	})
	for i := range pkgs {
		for _, q := range pkgs[:i] {
			if q.Binary == pkgs[i].Binary || q.Capability == pkgs[i].Capability {
				return nil, fmt.Errorf("packages %s and %s would share a test binary name or matrix column", q.Dir, pkgs[i].Dir)
			}
		}
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("no package under %s has tests that call bpftest.Require", root)
	}
	return pkgs, nil
}

func testsUseBPF(dir string, files []string) (bool, error) {
	for _, name := range files {
		src, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return false, err
		}
		for _, m := range bpfTestMarkers {
			if bytes.Contains(src, []byte(m)) {
				return true, nil
			}
		}
	}
	return false, nil
}

// BuildTestBinaries compiles the packages' tests into static binaries in
// stage/bin (CGO_ENABLED=0: they must run in a busybox initramfs with no C
// library). The binaries run from their package directory as `go test`
// runs them, so what tests read from there is copied into stage at the
// same relative paths: each package's files other than Go sources (such
// as metadata.yaml), its testdata/, and the module's top-level testdata/.
//
// -s -w drops the symbol table and DWARF: the initramfs is smaller and
// unpacks faster under emulation, and panics still print function names
// and lines (from pclntab).
func BuildTestBinaries(ctx context.Context, root, stage string, pkgs []Package, log io.Writer) error {
	bin := filepath.Join(stage, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	args := []string{"test", "-c", "-trimpath", "-ldflags=-s -w", "-o", bin + string(filepath.Separator)}
	for _, p := range pkgs {
		args = append(args, "./"+p.Dir)
	}
	fmt.Fprintf(log, "kernels: go %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building the test binaries: %w", err)
	}
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(bin, p.Binary)); err != nil {
			return fmt.Errorf("go test -c made no %s: %w", p.Binary, err)
		}
		if err := os.MkdirAll(filepath.Join(stage, p.Dir), 0o755); err != nil {
			return err
		}
		if err := copyTree(filepath.Join(root, p.Dir, "testdata"), filepath.Join(stage, p.Dir, "testdata")); err != nil {
			return err
		}
		if err := copyDataFiles(filepath.Join(root, p.Dir), filepath.Join(stage, p.Dir)); err != nil {
			return err
		}
	}
	return copyTree(filepath.Join(root, "testdata"), filepath.Join(stage, "testdata"))
}

// copyDataFiles copies the regular files of src, not its subdirectories,
// except Go sources.
func copyDataFiles(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyTree copies regular files and directories from src to dst; a
// missing src copies nothing.
func copyTree(src, dst string) error {
	if _, err := os.Stat(src); os.IsNotExist(err) {
		return nil
	}
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o644)
	})
}
