package main

import (
	"regexp"
	"slices"
	"strings"
)

// HookMatrix is one line of the hook availability table that a test
// prints by trying every hook type alone on every hook point:
//
//	HOOKMATRIX capability=<stream|handshake> point=<hook point> kind=<hook type> result=<attached|refused|none> reason=<text to end of line>
type HookMatrix struct {
	Capability string `json:"capability"`
	Point      string `json:"point"`
	Kind       string `json:"kind"`
	Result     string `json:"result"`
	Reason     string `json:"reason,omitempty"`
}

// HookChoice says which hook type attached a hook point in a run:
//
//	HOOKS capability=<stream|handshake> point=<hook point> kind=<hook type that attached>
type HookChoice struct {
	Capability string `json:"capability"`
	Point      string `json:"point"`
	Kind       string `json:"kind"`
}

// The tests print these with t.Logf, so under -test.v they follow a
// "file_test.go:NN: " prefix. The keyword must start a word and be
// followed by key=value, so prose that mentions HOOKS is not a record.
var hookLineRE = regexp.MustCompile(`(?:^|\s)(HOOKMATRIX|HOOKS)\s+([a-z_]+=.*)$`)

var hookResults = []string{"attached", "refused", "none"}

// parseHookLine reads a HOOKMATRIX or HOOKS line. ok reports whether line
// is one; then exactly one of hm and hc is set, or neither when the line
// is malformed (a missing field, an unknown result).
func parseHookLine(line string) (hm *HookMatrix, hc *HookChoice, ok bool) {
	m := hookLineRE.FindStringSubmatch(line)
	if m == nil {
		return nil, nil, false
	}
	f := hookFields(m[2])
	has := func(keys ...string) bool {
		for _, k := range keys {
			if f[k] == "" {
				return false
			}
		}
		return true
	}
	switch m[1] {
	case "HOOKMATRIX":
		if !has("capability", "point", "kind", "result") || !slices.Contains(hookResults, f["result"]) {
			return nil, nil, true
		}
		return &HookMatrix{Capability: f["capability"], Point: f["point"], Kind: f["kind"], Result: f["result"], Reason: f["reason"]}, nil, true
	default:
		if !has("capability", "point", "kind") {
			return nil, nil, true
		}
		return nil, &HookChoice{Capability: f["capability"], Point: f["point"], Kind: f["kind"]}, true
	}
}

// hookFields splits "k=v k=v reason=free text" into a map: values end at
// a space, except reason's, which runs to the end of the line.
func hookFields(s string) map[string]string {
	f := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimLeft(s, " \t") {
		key, rest, found := strings.Cut(s, "=")
		if !found || strings.ContainsAny(key, " \t") {
			// A word without "=": skip it.
			_, s, _ = strings.Cut(s, " ")
			continue
		}
		if key == "reason" {
			f[key] = strings.TrimSpace(rest)
			break
		}
		val, next, _ := strings.Cut(rest, " ")
		f[key] = val
		s = next
	}
	return f
}
