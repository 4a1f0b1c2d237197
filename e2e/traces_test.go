//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// exportedSpan is a span as the sink collector wrote it, with its
// resource's attributes.
type exportedSpan struct {
	Span     ptrace.Span
	Resource pcommon.Map
}

// readSpans parses the file exporter's output: OTLP JSON, one TracesData
// per line. A last line still being written is left for the next read.
func readSpans(path string) ([]exportedSpan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	var out []exportedSpan
	var um ptrace.JSONUnmarshaler
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		td, err := um.UnmarshalTraces(line)
		if err != nil {
			if !bytes.HasSuffix(b, []byte("\n")) {
				break // partial last line
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for i := range td.ResourceSpans().Len() {
			rs := td.ResourceSpans().At(i)
			for j := range rs.ScopeSpans().Len() {
				spans := rs.ScopeSpans().At(j).Spans()
				for k := range spans.Len() {
					out = append(out, exportedSpan{Span: spans.At(k), Resource: rs.Resource().Attributes()})
				}
			}
		}
	}
	return out, sc.Err()
}

// waitSpans polls the sink's file until keep selects want spans.
func waitSpans(t *testing.T, path string, want int, timeout time.Duration, keep func(exportedSpan) bool) []exportedSpan {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		all, err := readSpans(path)
		if err != nil {
			t.Fatalf("reading spans: %v", err)
		}
		var got []exportedSpan
		for _, s := range all {
			if keep(s) {
				got = append(got, s)
			}
		}
		if len(got) >= want || time.Now().After(deadline) {
			if len(got) != want {
				t.Fatalf("%s: %d matching spans after %s, want %d (%d spans in the file)", path, len(got), timeout, want, len(all))
			}
			return got
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// attrStr returns a string attribute, or a description of what is there.
func attrStr(m pcommon.Map, k string) string {
	v, ok := m.Get(k)
	if !ok {
		return "<missing>"
	}
	if v.Type() != pcommon.ValueTypeStr {
		return fmt.Sprintf("<%s %s>", v.Type(), v.AsString())
	}
	return v.Str()
}

// attrInt returns an int attribute, or -1 when it is missing or not an int.
func attrInt(m pcommon.Map, k string) int64 {
	v, ok := m.Get(k)
	if !ok || v.Type() != pcommon.ValueTypeInt {
		return -1
	}
	return v.Int()
}

// attrDouble returns a double attribute, or -1 when it is missing or not a
// double.
func attrDouble(m pcommon.Map, k string) float64 {
	v, ok := m.Get(k)
	if !ok || v.Type() != pcommon.ValueTypeDouble {
		return -1
	}
	return v.Double()
}
