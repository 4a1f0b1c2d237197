package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type cpioEntry struct {
	Name        string
	Mode        uint32
	Rdev        [2]uint32
	Data        string
	Nlink, UID  uint32
	Ino, Mtime_ uint32
}

// readNewc parses a newc archive the way the kernel does (fields, 4-byte
// alignment of name and data), independently of the writer.
func readNewc(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		e := cpioEntry{Ino: field(0), Mode: field(1), UID: field(2), Nlink: field(4), Mtime_: field(5), Rdev: [2]uint32{field(9), field(10)}}
		size, nameSize := int(field(6)), int(field(11))
		nameStart := off + 110
		e.Name = string(b[nameStart : nameStart+nameSize-1])
		if b[nameStart+nameSize-1] != 0 {
			t.Fatalf("%s: name not NUL-terminated", e.Name)
		}
		dataStart := align(nameStart + nameSize)
		e.Data = string(b[dataStart : dataStart+size])
		off = align(dataStart + size)
		if e.Name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestCPIO(t *testing.T) {
	var buf bytes.Buffer
	z := gzipWriter(&buf)
	c := NewCPIO(z)
	c.Dir("/bin", 0o755)
	c.CharDev("dev/console", 0o600, 5, 1)
	c.File("init", 0o755, []byte("#!/bin/sh\n")) // 10 bytes: padded
	c.File("w/a", 0o644, []byte("abcd"))         // aligned already
	c.Symlink("bin/sh", "busybox")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	want := []cpioEntry{
		{Ino: 1, Name: "bin", Mode: 0o040755, Nlink: 2},
		{Ino: 2, Name: "dev/console", Mode: 0o020600, Nlink: 1, Rdev: [2]uint32{5, 1}},
		{Ino: 3, Name: "init", Mode: 0o100755, Nlink: 1, Data: "#!/bin/sh\n"},
		{Ino: 4, Name: "w/a", Mode: 0o100644, Nlink: 1, Data: "abcd"},
		{Ino: 5, Name: "bin/sh", Mode: 0o120777, Nlink: 1, Data: "busybox"},
	}
	if diff := cmp.Diff(want, readNewc(t, raw)); diff != "" {
		t.Errorf("archive (-want +got):\n%s", diff)
	}
}
