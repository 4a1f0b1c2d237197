package teststack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"
)

// CurlResult is what curl saw of one request, from its --write-out
// variables.
type CurlResult struct {
	Status    int
	Body      []byte // without the chunked framing
	LocalPort int
	// TTFB is curl's time_starttransfer: from the start to the first
	// response byte; Total its time_total.
	TTFB, Total time.Duration
	// EventNS is when curl wrote out each SSE data line but [DONE]
	// (MonotonicNow): curl -N writes what each read brought at once.
	EventNS []uint64
	// DoneNS is when curl wrote out the data: [DONE] line, 0 if none came.
	DoneNS uint64
}

// eventStamps is curl's stdout: it keeps the body and stamps each SSE
// data line as the write that completes it comes.
type eventStamps struct {
	body    bytes.Buffer
	line    []byte
	eventNS []uint64
	doneNS  uint64
}

func (e *eventStamps) Write(p []byte) (int, error) {
	now := MonotonicNow()
	e.body.Write(p)
	for _, c := range p {
		if c != '\n' {
			e.line = append(e.line, c)
			continue
		}
		if IsEventLine(string(e.line)) {
			e.eventNS = append(e.eventNS, now)
		} else if IsDoneLine(string(e.line)) {
			e.doneNS = now
		}
		e.line = e.line[:0]
	}
	return len(p), nil
}

// Curl POSTs body as JSON to url with curl (unbuffered, as a user tails a
// stream with -N) and extra "Name: value" headers, and returns what it
// saw.
func Curl(ctx context.Context, url, body string, headers ...string) (CurlResult, error) {
	return CurlWith(ctx, CurlOptions{Headers: headers}, url, body)
}

// CurlOptions are curl's settings besides the URL and the body.
type CurlOptions struct {
	// CACert is a PEM certificate to trust for https URLs (--cacert);
	// https is spoken as HTTP/1.1.
	CACert string
	// Headers are extra "Name: value" headers.
	Headers []string
}

// CurlWith is Curl with options.
func CurlWith(ctx context.Context, opts CurlOptions, url, body string) (CurlResult, error) {
	args := []string{"-sS", "-N", "--max-time", "60", "-X", "POST",
		"-H", "Content-Type: application/json", "--data-binary", body,
		// The body to stdout, the timings to stderr as JSON.
		"-w", "%{stderr}%{json}"}
	for _, h := range opts.Headers {
		args = append(args, "-H", h)
	}
	if opts.CACert != "" {
		args = append(args, "--cacert", opts.CACert, "--http1.1")
	}
	cmd := exec.CommandContext(ctx, "curl", append(args, url)...)
	var stdout eventStamps
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := CurlResult{Body: stdout.body.Bytes(), EventNS: stdout.eventNS, DoneNS: stdout.doneNS}
	if err != nil {
		return res, fmt.Errorf("curl %s: %v: %s", url, err, stderr.String())
	}
	var w struct {
		HTTPCode          int     `json:"http_code"`
		LocalPort         int     `json:"local_port"`
		TimeStartTransfer float64 `json:"time_starttransfer"`
		TimeTotal         float64 `json:"time_total"`
	}
	if err := json.Unmarshal(stderr.Bytes(), &w); err != nil {
		return res, fmt.Errorf("curl's --write-out %q: %w", stderr.String(), err)
	}
	res.Status, res.LocalPort = w.HTTPCode, w.LocalPort
	res.TTFB = time.Duration(w.TimeStartTransfer * float64(time.Second))
	res.Total = time.Duration(w.TimeTotal * float64(time.Second))
	return res, nil
}
