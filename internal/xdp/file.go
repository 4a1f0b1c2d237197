package xdp

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"syscall"
)

// fileStamp identifies one version of a file by its metadata. Any change
// of content changes the size, the modification time or, for a
// replacement by rename, the inode; ctime catches the rest (a write
// within the mtime granularity that keeps the size).
type fileStamp struct {
	missing      bool
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func statFile(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{missing: true}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileStamp{size: fi.Size(), mtime: syscall.NsecToTimespec(fi.ModTime().UnixNano())}
	}
	return fileStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// fileVersion is one version of the blocklist file as read: its stamp and
// the SHA-256 of its content (read: false when it could not be read whole,
// for example because it is missing or too large).
type fileVersion struct {
	stamp fileStamp
	read  bool
	sum   [sha256.Size]byte
}

// errChanging says the file changed while it was being read: whatever was
// read may be a mix of two versions.
var errChanging = errors.New("the file changed while it was being read")

// readVersion reads the file whole, refusing one larger than maxBytes
// before reading it, and returns its content and version. A file whose
// stamp differs before and after the read gives errChanging.
func readVersion(path string, maxBytes int64) ([]byte, fileVersion, error) {
	before := statFile(path)
	v := fileVersion{stamp: before}
	if before.size > maxBytes {
		return nil, v, reloadErr(FailureTooLarge, fmt.Errorf("%s: %d bytes, more than max_file_bytes (%d)", path, before.size, maxBytes))
	}
	fd, err := os.Open(path)
	if err != nil {
		return nil, v, reloadErr(FailureRead, fmt.Errorf("blocklist file: %w", err))
	}
	defer fd.Close()
	content, err := io.ReadAll(io.LimitReader(fd, maxBytes+1))
	if err != nil {
		return nil, v, reloadErr(FailureRead, fmt.Errorf("blocklist file %s: %w", path, err))
	}
	if int64(len(content)) > maxBytes {
		return nil, v, reloadErr(FailureTooLarge, fmt.Errorf("%s: more than max_file_bytes (%d)", path, maxBytes))
	}
	if statFile(path) != before {
		return nil, v, errChanging
	}
	v.read, v.sum = true, sha256.Sum256(content)
	return content, v, nil
}

// decodeFile turns the file's content into the whole blocklist (the
// configured entries, then the file's), or a *ReloadError naming the file
// and, for bad entries, their lines.
func (f *Filter) decodeFile(content []byte) ([]netip.Prefix, error) {
	path := f.cfg.BlocklistFile
	res := parseLines(bytes.NewReader(content), path, f.policy.checkEntry)
	if m := f.cfg.EndMarker; m != "" && res.lastLine != m {
		return nil, reloadErr(FailureIncomplete, fmt.Errorf("%s does not end with the end marker line %q: "+
			"taken as still being written", path, m))
	}
	if len(res.parseErrs) > 0 {
		return nil, reloadErr(FailureParse, append(res.parseErrs, res.policyErrs...)...)
	}
	if len(res.policyErrs) > 0 {
		return nil, reloadErr(FailurePolicy, res.policyErrs...)
	}
	all := append(slices.Clone(f.static), res.prefixes...)
	v4, v6 := normalize(all)
	if err := f.checkCapacity(len(v4), len(v6), path+": with the configured entries, "); err != nil {
		return nil, err
	}
	return all, nil
}
