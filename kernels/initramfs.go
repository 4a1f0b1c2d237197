package main

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// guestRoot is where the stage directory (test binaries, testdata, plan)
// lives in the guest.
const guestRoot = "/w"

// BuildInitramfs writes the guests' initramfs to out: the host's stacks
// (WriteUserland), then a gzip'd newc cpio of busybox (static) as
// /bin/busybox, /init, a few /etc files, and the stage directory under /w.
// Busybox installs its applet links itself at boot. The uncompressed
// archive comes first, as early microcode does: the kernel reads an
// archive's end by its trailer, and a compressed one by its stream.
func BuildInitramfs(out, busybox, stage string, stacks []string) error {
	if err := checkStatic(busybox); err != nil {
		return err
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	if len(stacks) > 0 {
		if _, err := WriteUserland(bw, stacks); err != nil {
			return err
		}
	}
	z := gzipWriter(bw)
	c := NewCPIO(z)
	for _, d := range []string{"bin", "dev", "etc", "proc", "run", "sys", "tmp", "root"} {
		c.Dir(d, 0o755)
	}
	// The kernel opens /dev/console for init's stdin/stdout before any
	// devtmpfs is mounted.
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("bin/busybox", 0o755, bb)
	c.Symlink("bin/sh", "busybox")
	c.File("init", 0o755, []byte(InitScript()))
	// Go resolves localhost and user names from these files (no libc).
	c.File("etc/hosts", 0o644, []byte("127.0.0.1 localhost\n::1 localhost\n"))
	c.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	c.File("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	c.Dir(strings.TrimPrefix(guestRoot, "/"), 0o755)
	err = filepath.WalkDir(stage, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == stage {
			return err
		}
		rel, _ := filepath.Rel(stage, p)
		name := strings.TrimPrefix(guestRoot, "/") + "/" + filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			c.Dir(name, 0o755)
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			c.File(name, uint32(info.Mode().Perm()), data)
		default:
			return fmt.Errorf("%s: only files and directories go into the initramfs", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err := z.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// checkStatic fails for a dynamically linked binary: the initramfs has no
// C library (Debian's busybox package is dynamic, busybox-static is not).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w (install busybox-static)", path, err)
	}
	defer f.Close()
	if interp, err := interpreter(f); err != nil || interp != "" {
		return fmt.Errorf("%s is dynamically linked (%v): the guests need busybox-static's /bin/busybox", path, err)
	}
	return nil
}

// interpreter returns the dynamic loader f names ("" for a static
// executable or a library).
func interpreter(f *elf.File) (string, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			return strings.TrimRight(string(b), "\x00"), err
		}
	}
	return "", nil
}
