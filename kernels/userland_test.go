package main

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// TestUserlandCarriesWhatAProgramLoads: a program goes into the archive at
// its host path with its loader and every library it needs, each
// directory before what it holds, the host's top-level links (/lib64 ->
// usr/lib64) as links, and none over a name the base initramfs owns.
func TestUserlandCarriesWhatAProgramLoads(t *testing.T) {
	prog, err := filepath.EvalSymlinks(teststack.RequireTool(t, "curl"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := WriteUserland(&buf, []string{prog})
	if err != nil {
		t.Fatal(err)
	}
	entries := readNewc(t, buf.Bytes())
	byName := map[string]cpioEntry{}
	var size int64
	for _, e := range entries {
		if _, dup := byName[e.Name]; dup {
			t.Errorf("%s twice", e.Name)
		}
		if dir := filepath.Dir(e.Name); dir != "." {
			if d, ok := byName[dir]; !ok || (d.Mode&0o170000 != modeDir && d.Mode&0o170000 != modeSymlink) {
				t.Errorf("%s before its directory %s", e.Name, dir)
			}
		}
		if filepath.Dir(e.Name) == "." && e.Mode&0o170000 == modeSymlink {
			for _, b := range baseNames {
				if e.Name == b {
					t.Errorf("a link over the base initramfs's %s", b)
				}
			}
		}
		if e.Mode&0o170000 == modeFile {
			size += int64(len(e.Data))
		}
		byName[e.Name] = e
	}
	if size != n {
		t.Errorf("%d bytes of files in the archive, WriteUserland says %d", size, n)
	}
	// Every file the loader will open, found through the archive's own
	// links: the program, its interpreter, libcurl and libssl.
	for _, want := range []string{prog, "/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libcurl.so.4", "/lib/x86_64-linux-gnu/libssl.so.3"} {
		if e, ok := walk(byName, want); !ok || e.Mode&0o170000 != modeFile || len(e.Data) == 0 {
			t.Errorf("%s: not in the archive as a file", want)
		}
	}
	// Files keep their times (Python checks its bytecode against them).
	info, err := os.Stat(prog)
	if err != nil {
		t.Fatal(err)
	}
	if e := byName[strings.TrimPrefix(prog, "/")]; int64(e.Mtime_) != info.ModTime().Unix() {
		t.Errorf("%s: mtime %d in the archive, %d on the host", prog, e.Mtime_, info.ModTime().Unix())
	}
}

// walk finds path p in the archive as the kernel would in the unpacked
// tree: component by component, following links (40 at most).
func walk(byName map[string]cpioEntry, p string) (cpioEntry, bool) {
	comps := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for links := 0; len(comps) > 0; {
		c := comps[0]
		comps = comps[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = strings.TrimSuffix(path.Dir(cur), ".")
			continue
		}
		next := path.Join(cur, c)
		e, ok := byName[next]
		if !ok {
			return e, false
		}
		if e.Mode&0o170000 == modeSymlink {
			if links++; links > 40 {
				return e, false
			}
			if path.IsAbs(e.Data) {
				cur = ""
			}
			comps = append(strings.Split(strings.Trim(e.Data, "/"), "/"), comps...)
			continue
		}
		if len(comps) == 0 {
			return e, true
		}
		cur = next
	}
	return cpioEntry{}, false
}
