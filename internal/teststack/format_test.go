package teststack

import "testing"

func TestIsEventLine(t *testing.T) {
	for line, want := range map[string]bool{
		"data: {\"a\":1}":   true,
		"data: {\"a\":1}\n": true,
		"data:x":            true,
		"data: [DONE]":      false,
		"data: [DONE]\r\n":  false,
		": keep-alive":      false,
		"event: message":    false,
		"":                  false,
	} {
		if got := IsEventLine(line); got != want {
			t.Errorf("IsEventLine(%q) = %v, want %v", line, got, want)
		}
	}
}
