package main

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// guestMissingTools are commands that a test may run which the guests do
// not have, or have only as a busybox applet that cannot do what the tests
// ask (busybox ip has no netns and no veth).
var guestMissingTools = []string{"ip", "setpriv", "nsenter", "unshare", "tc", "iptables", "nft", "bpftool", "ethtool", "sysctl"}

// TestGuestSkipsMatchTheSources reads the BPF packages' test files: every
// top-level test that needs a tool the guests lack must be in guestSkips,
// and every entry must name a test that exists. "Needs a tool" is a call
// of bpftest.VethPair, or exec.Command/CommandContext of one of
// guestMissingTools, in the test or in a function of its package that it
// calls (at any depth).
func TestGuestSkipsMatchTheSources(t *testing.T) {
	pkgs, err := DiscoverPackages(context.Background(), "..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		tests, needs := toolNeeds(t, filepath.Join("..", p.Dir))
		for _, name := range tests {
			listed := slices.ContainsFunc(guestSkips, func(s Skip) bool { return s.Dir == p.Dir && s.Test == name })
			if why := needs[name]; why != "" && !listed {
				t.Errorf("%s: %s %s, which the guests lack: add it to guestSkips in kernels/plan.go with the reason", p.Dir, name, why)
			}
		}
	}
	for _, s := range guestSkips {
		i := slices.IndexFunc(pkgs, func(p Package) bool { return p.Dir == s.Dir })
		if i < 0 {
			t.Errorf("guestSkips names package %s, which has no BPF tests", s.Dir)
			continue
		}
		if tests, _ := toolNeeds(t, filepath.Join("..", s.Dir)); !slices.Contains(tests, s.Test) {
			t.Errorf("guestSkips names %s.%s, which does not exist", s.Dir, s.Test)
		}
	}
	for _, s := range hookRunSkips {
		if tests, _ := toolNeeds(t, filepath.Join("..", s.Dir)); !slices.Contains(tests, s.Test) {
			t.Errorf("hookRunSkips names %s.%s, which does not exist", s.Dir, s.Test)
		}
	}
	for _, o := range append(slices.Clone(hookRunOnly), guestOnly...) {
		tests, _ := toolNeeds(t, filepath.Join("..", o.Dir))
		for _, name := range o.Tests {
			if !slices.Contains(tests, name) {
				t.Errorf("hookRunOnly names %s.%s, which does not exist", o.Dir, name)
			}
		}
	}
}

// toolNeeds parses a package's test files and returns its top-level
// tests and, for those that need a missing tool, what they call.
func toolNeeds(t *testing.T, dir string) (tests []string, needs map[string]string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	calls := map[string][]string{} // function or method name -> names it calls
	direct := map[string]string{}  // function -> the tool call in its own body
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if fn.Recv == nil && strings.HasPrefix(name, "Test") && name != "TestMain" {
				tests = append(tests, name)
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch f := call.Fun.(type) {
				case *ast.Ident:
					calls[name] = append(calls[name], f.Name)
				case *ast.SelectorExpr:
					calls[name] = append(calls[name], f.Sel.Name)
					if pkg, ok := f.X.(*ast.Ident); ok {
						if why := toolCall(pkg.Name, f.Sel.Name, call.Args); why != "" && direct[name] == "" {
							direct[name] = why
						}
					}
				}
				return true
			})
		}
	}
	needs = map[string]string{}
	for _, test := range tests {
		seen := map[string]bool{}
		var walk func(string) string
		walk = func(fn string) string {
			if seen[fn] {
				return ""
			}
			seen[fn] = true
			if why := direct[fn]; why != "" {
				return why
			}
			for _, c := range calls[fn] {
				if why := walk(c); why != "" {
					return why
				}
			}
			return ""
		}
		needs[test] = walk(test)
	}
	return tests, needs
}

func toolCall(pkg, fn string, args []ast.Expr) string {
	switch {
	case pkg == "bpftest" && fn == "VethPair":
		return "calls bpftest.VethPair (ip netns, veth)"
	case pkg == "exec" && (fn == "Command" || fn == "CommandContext"):
		i := 0
		if fn == "CommandContext" {
			i = 1
		}
		if len(args) <= i {
			return ""
		}
		lit, ok := args[i].(*ast.BasicLit)
		if !ok {
			return "" // the test binary itself, or a path it computed
		}
		name, _ := strconv.Unquote(lit.Value)
		if slices.Contains(guestMissingTools, name) {
			return "runs " + name
		}
	}
	return ""
}
