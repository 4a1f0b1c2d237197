package main

import (
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// stackPrograms are the host's programs that the guests' tests run as
// servers and clients (internal/teststack): Python with uvicorn and
// starlette (Debian's python3-uvicorn, the stack vLLM serves with), Node's
// http module, and curl. They go into the guests at their host paths,
// with the libraries they load (OpenSSL's libssl among them, which the
// TLS uprobes attach to), so that a guest runs the same servers over TLS
// as the native row does. `make deps` installs them.
var stackPrograms = []string{"/usr/bin/python3", "/usr/bin/node", "/usr/bin/curl", "/usr/lib/ssl/openssl.cnf"}

// pythonLeftOut are parts of Python's standard library that no test
// server imports: static libraries, the test suite, GUI and packaging
// tools. Left out, they save a fifth of the guests' archive.
var pythonLeftOut = []string{"config-", "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data", "distutils"}

// pythonPackages prints the files or directories of the packages outside
// the standard library that the test servers import (servers/asgi_common.py
// under uvicorn, starlette or FastAPI), loading uvicorn's configuration so
// that the implementations it picks at run time are imported too.
const pythonPackages = `
import sys
import uvicorn, fastapi, starlette.applications, starlette.routing, starlette.responses
uvicorn.Config(lambda *a: None, log_level="info", access_log=False, lifespan="off").load()
import uvicorn.server
found = set()
for m in list(sys.modules.values()):
    f = getattr(m, "__file__", None) or ""
    for p in sys.path:
        if p.endswith("-packages") and f.startswith(p + "/"):
            found.add(p + "/" + f[len(p) + 1:].split("/")[0])
print("\n".join(sorted(found)))
`

// StackPaths returns the host paths that carry the stacks: the programs,
// Python's standard library (less pythonLeftOut) and the packages the
// test servers import, as the host's python3 finds them.
func StackPaths() ([]string, error) {
	paths := slices.Clone(stackPrograms)
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		return nil, fmt.Errorf("python3: %w (make deps installs the stacks the guests' tests run)", err)
	}
	stdlib := filepath.Join("/usr/lib", filepath.Base(py))
	entries, err := os.ReadDir(stdlib)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if !slices.ContainsFunc(pythonLeftOut, func(p string) bool {
			return e.Name() == p || strings.HasSuffix(p, "-") && strings.HasPrefix(e.Name(), p)
		}) {
			paths = append(paths, filepath.Join(stdlib, e.Name()))
		}
	}
	cmd := exec.Command(py, "-c", pythonPackages)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("%s cannot import the test servers' packages: %w: %s (make deps installs them)", py, err, strings.TrimSpace(string(stderr)))
	}
	return append(paths, strings.Fields(string(out))...), nil
}

// libraryDirs are where the dynamic loader looks for a library that no
// RUNPATH names: Debian's multiarch directories, then the usual ones.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// baseNames are the initramfs's own top-level entries (BuildInitramfs):
// a host path through a symlink of one of these names (Debian's /bin ->
// usr/bin) is added at its resolved path instead.
var baseNames = []string{"bin", "dev", "etc", "proc", "run", "sys", "tmp", "root", "init", strings.TrimPrefix(guestRoot, "/")}

// userland collects host files for the initramfs: each at its host path,
// with the directories above it, the top-level symlinks on the way to it
// (Debian's /lib -> usr/lib, which the loader's paths name; deeper ones
// are resolved), and the shared libraries and interpreter of each ELF
// file among them. Files keep their modification times: Python checks
// its cached bytecode against its sources' and would compile every
// module again, under emulation, were they all 0.
type userland struct {
	c     *CPIO
	done  map[string]bool // paths added whole: files, links, directories walked
	dirs  map[string]bool // directories made, walked or not
	bytes int64
}

// maxLinks bounds the symlinks followed for one path, as the kernel's
// ELOOP does.
const maxLinks = 40

// WriteUserland writes a newc archive of roots (files or directories,
// taken whole) and everything they need to run to w, uncompressed: the
// kernel unpacks an initramfs made of several archives, compressed or
// not, in turn, and this one, mostly binaries, hardly compresses. It
// returns the bytes of file data written.
func WriteUserland(w io.Writer, roots []string) (int64, error) {
	u := &userland{c: NewCPIO(w), done: map[string]bool{}, dirs: map[string]bool{}}
	for _, r := range roots {
		if err := u.add(r, 0); err != nil {
			return 0, fmt.Errorf("%s: %w (make deps installs the stacks the guests' tests run)", r, err)
		}
	}
	return u.bytes, u.c.Close()
}

// add adds host path p (following symlinks, which it adds as symlinks);
// links counts the symlinks followed to reach it.
func (u *userland) add(p string, links int) error {
	if links > maxLinks {
		return fmt.Errorf("%s: too many levels of symbolic links", p)
	}
	p = filepath.Clean(p)
	if p == "/" {
		return nil
	}
	dir, err := u.dir(filepath.Dir(p), links)
	if err != nil {
		return err
	}
	p = filepath.Join(dir, filepath.Base(p))
	if u.done[p] {
		return nil
	}
	info, err := os.Lstat(p)
	if err != nil {
		return err
	}
	u.done[p] = true
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		u.c.Symlink(p, target)
		if !path.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		return u.add(target, links+1)
	case info.IsDir():
		u.mkdir(p, info)
		entries, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := u.add(filepath.Join(p, e.Name()), links); err != nil {
				return err
			}
		}
		return nil
	case info.Mode().IsRegular():
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		u.c.FileAt(p, uint32(info.Mode().Perm()), info.ModTime(), data)
		u.bytes += int64(len(data))
		return u.addNeeds(p)
	}
	return nil // sockets, fifos, devices: not needed to run anything
}

// mkdir adds directory d once.
func (u *userland) mkdir(d string, info fs.FileInfo) {
	if !u.dirs[d] {
		u.dirs[d] = true
		u.c.Dir(d, uint32(info.Mode().Perm()))
	}
}

// dir returns d with the symlinks in it resolved, adding the directories
// on the way and, at the top level, the symlinks themselves (but over
// none of baseNames).
func (u *userland) dir(d string, links int) (string, error) {
	if d == "/" {
		return d, nil
	}
	if links > maxLinks {
		return "", fmt.Errorf("%s: too many levels of symbolic links", d)
	}
	parent, err := u.dir(filepath.Dir(d), links)
	if err != nil {
		return "", err
	}
	d = filepath.Join(parent, filepath.Base(d))
	info, err := os.Lstat(d)
	if err != nil {
		return "", err
	}
	if info.Mode()&fs.ModeSymlink == 0 {
		u.mkdir(d, info)
		return d, nil
	}
	target, err := os.Readlink(d)
	if err != nil {
		return "", err
	}
	if parent == "/" && !slices.Contains(baseNames, filepath.Base(d)) && !u.done[d] {
		u.done[d] = true
		u.c.Symlink(d, target)
	}
	if !path.IsAbs(target) {
		target = filepath.Join(parent, target)
	}
	return u.dir(target, links+1)
}

// addNeeds adds the interpreter and the shared libraries an ELF file
// needs (none for other files).
func (u *userland) addNeeds(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return nil // not ELF
	}
	defer f.Close()
	interp, err := interpreter(f)
	if err != nil {
		return fmt.Errorf("%s's interpreter: %w", p, err)
	}
	if interp != "" {
		if err := u.add(interp, 0); err != nil {
			return fmt.Errorf("%s's interpreter: %w", p, err)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil // no dynamic section
	}
	var runpath []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				runpath = append(runpath, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(p)))
			}
		}
	}
	for _, lib := range libs {
		found := ""
		for _, d := range append(runpath, libraryDirs...) {
			if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
				found = filepath.Join(d, lib)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%s needs %s, found in none of %v", p, lib, append(runpath, libraryDirs...))
		}
		if err := u.add(found, 0); err != nil {
			return err
		}
	}
	return nil
}
