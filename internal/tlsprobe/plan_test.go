package tlsprobe

import (
	"crypto/tls"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// linkTLS makes the test binary link crypto/tls's Read and Write: it is
// the Go program these tests probe.
var noConn *tls.Conn

func linkTLS() {
	if noConn != nil {
		noConn.Read(nil)
		noConn.Write(nil)
	}
}

// libssl returns a shared libssl of this machine (curl's), failing or
// skipping as a missing stack does.
func libssl(t *testing.T) string {
	t.Helper()
	for _, pattern := range []string{"/usr/lib/*/libssl.so.*", "/lib/*/libssl.so.*", "/usr/lib64/libssl.so.*"} {
		m, _ := filepath.Glob(pattern)
		for _, p := range m {
			if _, err := inspect(p, true); err == nil {
				return p
			}
		}
	}
	teststack.RequireTool(t, "libssl.so (OpenSSL)") // fails or skips: it is not there
	return ""
}

// checkPoints checks that every Go entry point of p is at its function's
// stack check's conditional jump (JBE: 0x76 or 0x0f 0x86), which the
// kernel emulates, and every Go return point at a RET (0xc3).
func checkPoints(t *testing.T, path string, p *plan) map[role]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	roles := map[role]int{}
	for _, pt := range p.points {
		roles[pt.role]++
		if pt.role == roleGoRead || pt.role == roleGoWrite {
			b := make([]byte, 2)
			if _, err := f.ReadAt(b, int64(pt.offset)); err != nil || b[0] != 0x76 && (b[0] != 0x0f || b[1] != 0x86) {
				t.Errorf("role %d at %#x: % x, want the stack check's JBE: %v", pt.role, pt.offset, b, err)
			}
		}
		if pt.role == roleGoReadRet {
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, int64(pt.offset)); err != nil || b[0] != 0xc3 {
				t.Errorf("role %d at %#x: %x, want a RET (c3): %v", pt.role, pt.offset, b, err)
			}
		}
	}
	return roles
}

func TestOpenSSLPlanOfSharedLibssl(t *testing.T) {
	path := libssl(t)
	p, err := inspect(path, true)
	if err != nil {
		t.Fatal(err)
	}
	roles := checkPoints(t, path, p)
	t.Logf("%s: %d points %v", path, len(p.points), roles)
	if p.lib != LibOpenSSL || roles[roleRead] != 1 || roles[roleWrite] != 1 || roles[roleReadRet] < 1 || roles[roleWriteRet] < 1 {
		t.Errorf("plan %+v", p)
	}
	// OpenSSL 1.1.1 and 3 have the _ex calls too.
	if roles[roleReadEx] != 1 || roles[roleWriteEx] != 1 || roles[roleReadRet] != 2 || roles[roleWriteRet] != 2 {
		t.Errorf("_ex calls missing: %v", roles)
	}
}

func TestOpenSSLPlanOfNodeExecutable(t *testing.T) {
	node := teststack.RequireTool(t, "node")
	p, err := inspect(node, false)
	if err != nil {
		t.Fatal(err)
	}
	roles := checkPoints(t, node, p)
	t.Logf("%s: %v", node, roles)
	if p.lib != LibOpenSSL || roles[roleRead] != 1 || roles[roleWrite] != 1 {
		t.Errorf("node links OpenSSL in, the plan is %+v", p)
	}
}

func TestGoPlanOfThisBinary(t *testing.T) {
	linkTLS()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := inspect(exe, false)
	if err != nil {
		t.Fatal(err)
	}
	roles := checkPoints(t, exe, p)
	t.Logf("%s (%s): %v", exe, p.version, roles)
	if p.lib != LibGo || roles[roleGoRead] != 1 || roles[roleGoWrite] != 1 || roles[roleGoReadRet] < 1 {
		t.Errorf("plan %+v", p)
	}
}

// A Go program built with its symbol table and stripped of it (as release
// builds often are, -ldflags=-s) gets the same plan: the stripped one
// through its pclntab.
func TestGoPlanWithAndWithoutSymbols(t *testing.T) {
	goTool := teststack.RequireTool(t, "go")
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(goProgram), 0o644); err != nil {
		t.Fatal(err)
	}
	plans := map[string]*plan{}
	for _, flags := range []string{"", "-s -w"} {
		bin := filepath.Join(dir, "prog"+strings.ReplaceAll(flags, " ", ""))
		cmd := exec.Command(goTool, "build", "-ldflags="+flags, "-o", bin, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GO111MODULE=off") // the standard library only
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", flags, err, out)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		fns, _ := symbols(f, goRead, goWrite)
		f.Close()
		if (len(fns) == 2) != (flags == "") {
			t.Errorf("built with %q: symbol table has %d of the functions", flags, len(fns))
		}
		p, err := inspect(bin, false)
		if err != nil {
			t.Fatalf("built with %q: %v", flags, err)
		}
		checkPoints(t, bin, p)
		plans[flags] = p
	}
	if !reflect.DeepEqual(plans[""], plans["-s -w"]) {
		t.Errorf("with symbols %+v, stripped %+v", plans[""], plans["-s -w"])
	}
}

const goProgram = `package main

import (
	"crypto/tls"
	"os"
)

func main() {
	c := tls.Client(nil, &tls.Config{})
	if len(os.Args) > 5 {
		c.Read(nil)
		c.Write(nil)
	}
}
`

func TestNoTLSInAPlainExecutable(t *testing.T) {
	sh := teststack.RequireTool(t, "true")
	if p, err := inspect(sh, false); err != errNoTLS {
		t.Errorf("%s: plan %+v, error %v; want %v", sh, p, err, errNoTLS)
	}
}

func TestRegisterABI(t *testing.T) {
	for v, want := range map[string]bool{
		"go1.16.15": false, "go1.17": true, "go1.17rc1": true, "go1.21.0": true, "go1.26.8": true,
		"go1.9": false, "devel +abc": false, "go1.22.1 X:nocoverageredesign": true,
	} {
		if got := registerABI(v); got != want {
			t.Errorf("registerABI(%q) = %v, want %v", v, got, want)
		}
	}
}
