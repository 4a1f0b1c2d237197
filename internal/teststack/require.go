package teststack

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// RequireStacksEnv names the environment variable that turns "server
// stack unavailable" skips into failures; `make test` and the kernel
// matrix's plan (natively and in the guests, which carry the host's
// stacks) set it, and `make deps` installs the stacks.
const RequireStacksEnv = "TOKENWIRE_REQUIRE_STACKS"

// PythonEnv and NodeEnv name the interpreters to use instead of the
// defaults (Debian's /usr/bin/python3, then python3 and node on PATH).
const (
	PythonEnv = "TOKENWIRE_PYTHON"
	NodeEnv   = "TOKENWIRE_NODE"
)

// Stack is a server implementation that users run.
type Stack string

const (
	StackStarlette Stack = "python-starlette" // uvicorn + starlette
	StackFastAPI   Stack = "python-fastapi"   // uvicorn + FastAPI
	StackNodeHTTP  Stack = "node-http"        // Node's http module
	StackExpress   Stack = "node-express"     // express on Node
)

// Stacks lists every Stack.
var Stacks = []Stack{StackStarlette, StackFastAPI, StackNodeHTTP, StackExpress}

func (s Stack) python() bool { return strings.HasPrefix(string(s), "python-") }

// framework is the stack's TW_FRAMEWORK value.
func (s Stack) framework() string {
	_, f, _ := strings.Cut(string(s), "-")
	return f
}

// RequireStack skips the test when the stack cannot run here, or fails it
// when RequireStacksEnv is set.
func RequireStack(tb testing.TB, s Stack) {
	tb.Helper()
	_, err := stackTool(s)
	require(tb, string(s), err)
}

// RequireTool returns the path of a tool on PATH (curl), skipping or
// failing the test as RequireStack does when it is missing.
func RequireTool(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	require(tb, name, err)
	return path
}

func require(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv(RequireStacksEnv) != "" {
		tb.Fatalf("%s unavailable (%v) but %s is set", what, err, RequireStacksEnv)
	}
	tb.Skipf("%s unavailable: %v (set %s=1 to make this a failure; `make deps` installs it)", what, err, RequireStacksEnv)
}

// stackTool returns the interpreter that runs s, after checking that it
// has what s needs (installing express when missing).
func stackTool(s Stack) (string, error) {
	switch {
	case s.python():
		modules := "uvicorn, starlette"
		if s == StackFastAPI {
			modules += ", fastapi"
		}
		return findPython(modules)
	case s == StackNodeHTTP || s == StackExpress:
		node, err := findTool(NodeEnv, "node")
		if err != nil {
			return "", err
		}
		if s == StackExpress {
			if _, err := NodeModules(); err != nil {
				return "", err
			}
		}
		return node, nil
	}
	return "", fmt.Errorf("unknown stack %q", s)
}

var pythons sync.Map // modules -> pythonResult

type pythonResult struct {
	path string
	err  error
}

// findPython returns the first interpreter that imports modules: the
// pyenv or venv python3 first on PATH usually lacks Debian's packages,
// so /usr/bin/python3 comes before it.
func findPython(modules string) (string, error) {
	if r, ok := pythons.Load(modules); ok {
		return r.(pythonResult).path, r.(pythonResult).err
	}
	candidates := []string{"/usr/bin/python3", "python3"}
	if p := os.Getenv(PythonEnv); p != "" {
		candidates = []string{p}
	}
	var tried []string
	r := pythonResult{}
	for _, c := range candidates {
		path, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		out, err := exec.Command(path, "-c", "import "+modules).CombinedOutput()
		if err == nil {
			r.path = path
			break
		}
		tried = append(tried, fmt.Sprintf("%s: %s", path, lastLine(out)))
	}
	if r.path == "" {
		r.err = fmt.Errorf("no python3 imports %s (%s); Debian: apt-get install python3-uvicorn python3-starlette python3-fastapi",
			modules, strings.Join(tried, "; "))
	}
	pythons.Store(modules, r)
	return r.path, r.err
}

// findTool resolves a binary from an environment variable or a default
// name on PATH.
func findTool(env, def string) (string, error) {
	name := def
	if v := os.Getenv(env); v != "" {
		name = v
	}
	return exec.LookPath(name)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// RequireOpenSSLFile returns the file holding the OpenSSL API that the
// stack's interpreter calls: the executable itself when OpenSSL is linked
// into it (the nodejs package's node), else the shared libssl
// (RequireSharedLibSSL: Debian's Python, node built on the shared one).
func RequireOpenSSLFile(tb testing.TB, s Stack) string {
	tb.Helper()
	RequireStack(tb, s)
	exe, err := stackTool(s)
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	var f *elf.File
	if err == nil {
		f, err = elf.Open(exe)
	}
	require(tb, "the executable of "+string(s), err)
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	for _, sym := range syms {
		if sym.Name == "SSL_write" && sym.Section != elf.SHN_UNDEF && sym.Value != 0 {
			return exe
		}
	}
	return RequireSharedLibSSL(tb)
}

// RequireSharedLibSSL returns the path of the shared libssl that curl,
// Python's ssl module and Debian's node load (as the dynamic linker
// resolves it for curl), skipping or failing the test as RequireStack does
// when there is none.
func RequireSharedLibSSL(tb testing.TB) string {
	tb.Helper()
	RequireTool(tb, "curl")
	path, err := SharedLibSSL()
	require(tb, "a shared libssl", err)
	return path
}

// SharedLibSSL returns the path of the shared libssl that curl loads, as
// the dynamic linker resolves it (symbolic links resolved). It asks curl's
// own loader to list what it loads (--list, as ldd would), so that it
// needs no ldd, a bash script the kernel matrix's guests lack.
func SharedLibSSL() (string, error) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		return "", err
	}
	interp, err := interpreter(curl)
	if err != nil {
		return "", err
	}
	out, err := exec.Command(interp, "--list", curl).Output()
	if err != nil {
		return "", fmt.Errorf("%s --list %s: %w", interp, curl, err)
	}
	for line := range strings.Lines(string(out)) {
		// "\tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x...)"
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " => ")
		if ok && strings.HasPrefix(name, "libssl.so") {
			path, _, _ := strings.Cut(rest, " ")
			return filepath.EvalSymlinks(path)
		}
	}
	return "", fmt.Errorf("%s --list %s: no libssl.so", interp, curl)
}

// interpreter returns the dynamic loader an ELF executable names.
func interpreter(exe string) (string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				return "", fmt.Errorf("%s: %w", exe, err)
			}
			return strings.TrimRight(string(b), "\x00"), nil
		}
	}
	return "", fmt.Errorf("%s is statically linked", exe)
}
