package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"time"
)

// CPIO writes an initramfs: a newc ("070701") cpio archive, the format the
// kernel unpacks (Documentation/driver-api/early-userspace/buffer-format.rst).
// Written here rather than with cpio(1) so that CI needs one package less
// and the archive does not depend on the build machine's file owners and
// times: every entry is root's, with mtime 0 but FileAt's.
type CPIO struct {
	w     io.Writer
	ino   uint32
	mtime uint32 // of the next entry; 0 for all but FileAt's
	err   error
}

// Mode bits of newc entries (from stat(2)).
const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

// NewCPIO starts an archive on w.
func NewCPIO(w io.Writer) *CPIO { return &CPIO{w: w} }

// Dir adds a directory.
func (c *CPIO) Dir(name string, perm uint32) { c.entry(name, modeDir|perm, 0, 0, nil) }

// File adds a regular file.
func (c *CPIO) File(name string, perm uint32, data []byte) { c.entry(name, modeFile|perm, 0, 0, data) }

// FileAt adds a regular file modified at mtime (second resolution), for
// files whose readers check it.
func (c *CPIO) FileAt(name string, perm uint32, mtime time.Time, data []byte) {
	c.mtime = uint32(mtime.Unix())
	c.entry(name, modeFile|perm, 0, 0, data)
	c.mtime = 0
}

// Symlink adds a symbolic link to target.
func (c *CPIO) Symlink(name, target string) { c.entry(name, modeSymlink|0o777, 0, 0, []byte(target)) }

// CharDev adds a character device node.
func (c *CPIO) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, modeCharDev|perm, major, minor, nil)
}

// Close writes the trailer. It does not close the underlying writer.
func (c *CPIO) Close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}

func (c *CPIO) entry(name string, mode, rmajor, rminor uint32, data []byte) {
	if c.err != nil {
		return
	}
	name = strings.TrimPrefix(name, "/")
	c.ino++
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	// ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor namesize check
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, c.mtime, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

// pad aligns to 4 bytes after n bytes.
func (c *CPIO) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *CPIO) write(b []byte) {
	if c.err == nil && len(b) > 0 {
		_, c.err = c.w.Write(b)
	}
}

// gzipWriter compresses at the fastest level: the guest unpacks it under
// emulation, and the binaries hardly compress better at higher levels.
func gzipWriter(w io.Writer) *gzip.Writer {
	z, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return z
}
