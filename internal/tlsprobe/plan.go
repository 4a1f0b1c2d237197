package tlsprobe

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// Library is a kind of TLS library the probes know.
type Library string

// TLS libraries. LibUnknown is a process seen doing TLS on a watched port
// with no library the probes know (rustls, Java, a stripped static build).
const (
	LibOpenSSL Library = "openssl" // the OpenSSL API: OpenSSL 1.1 or 3, BoringSSL
	LibGo      Library = "go"      // Go's crypto/tls
	LibUnknown Library = "unknown"
)

// role is what a probe point does, and so which program goes there.
type role int

const (
	roleRead role = iota // SSL_read entry
	roleReadEx
	roleReadRet // SSL_read and SSL_read_ex return (uretprobe)
	roleWrite
	roleWriteEx
	roleWriteRet
	roleGoRead // (*Conn).Read entry
	roleGoReadRet
	roleGoWrite // (*Conn).Write entry: the socket write inside the call ends it
	numRoles
)

// uretprobe reports whether a role attaches at a function's return.
func (r role) uretprobe() bool { return r == roleReadRet || r == roleWriteRet }

// point is one uprobe of a plan: its program and file offset.
type point struct {
	role   role
	offset uint64
}

// plan is where to probe one file (a library or an executable).
type plan struct {
	lib     Library
	version string // Go: the toolchain that built it
	points  []point
}

// The OpenSSL API's functions: the plain ones are needed, the _ex ones
// (OpenSSL 1.1.1+; Python's ssl module calls them) are probed when present.
var openSSLCalls = []struct {
	name       string
	entry, ret role
	required   bool
}{
	{"SSL_read", roleRead, roleReadRet, true},
	{"SSL_read_ex", roleReadEx, roleReadRet, false},
	{"SSL_write", roleWrite, roleWriteRet, true},
	{"SSL_write_ex", roleWriteEx, roleWriteRet, false},
}

// openSSLPlan finds the OpenSSL API's read and write functions in f, a
// shared libssl or an executable that links OpenSSL or BoringSSL in
// (Node, Envoy). (nil, nil): f has none.
func openSSLPlan(f *elf.File) (*plan, error) {
	names := make([]string, len(openSSLCalls))
	for i, c := range openSSLCalls {
		names[i] = c.name
	}
	fns, err := symbols(f, names...)
	if err != nil {
		return nil, err
	}
	p := &plan{lib: LibOpenSSL}
	for _, c := range openSSLCalls {
		fn, ok := fns[c.name]
		if !ok {
			if c.required {
				if len(fns) == 0 {
					return nil, nil
				}
				return nil, fmt.Errorf("has some of the OpenSSL API but no %s", c.name)
			}
			continue
		}
		p.points = append(p.points, point{c.entry, fn.Offset}, point{c.ret, fn.Offset})
	}
	return p, nil
}

// errNoTLS: a file has no TLS library the probes know.
var errNoTLS = errors.New("no TLS library the probes know")

// inspect returns where to probe the file at path: an executable (Go's
// crypto/tls, or the OpenSSL API linked in) or, with lib set, a shared
// library (the OpenSSL API). errNoTLS: nothing to probe.
func inspect(path string, lib bool) (*plan, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := checkArch(f); err != nil {
		return nil, err
	}
	if !lib {
		p, err := goPlan(file, f)
		if !errors.Is(err, errNotGo) {
			if p == nil && err == nil {
				err = errNoTLS
			}
			return p, err
		}
	}
	p, err := openSSLPlan(f)
	if p == nil && err == nil {
		err = errNoTLS
	}
	return p, err
}

// fileID identifies a file's contents well enough to reuse what was read
// of it: the same inode, size and modification time.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    time.Time
}

func idOf(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no inode", path)
	}
	return fileID{dev: st.Dev, ino: st.Ino, size: fi.Size(), mtime: fi.ModTime()}, nil
}

// planCache remembers what inspect found per file: many processes map the
// same libssl, and a 100 MB executable (node) takes a while to read.
type planCache struct {
	mu    sync.Mutex
	plans map[fileID]planResult
}

type planResult struct {
	p   *plan
	err error
}

// maxPlans bounds the cache; when full it starts over.
const maxPlans = 256

func (c *planCache) inspect(path string, lib bool) (*plan, error) {
	id, err := idOf(path)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	r, ok := c.plans[id]
	c.mu.Unlock()
	if ok {
		return r.p, r.err
	}
	r.p, r.err = inspect(path, lib)
	c.mu.Lock()
	if c.plans == nil || len(c.plans) >= maxPlans {
		c.plans = map[fileID]planResult{}
	}
	c.plans[id] = r
	c.mu.Unlock()
	return r.p, r.err
}
