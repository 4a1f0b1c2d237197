package teststack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// NodeResult is one request as the Node (or Python) client saw it (times are
// CLOCK_MONOTONIC, comparable with the kernel's).
type NodeResult struct {
	Status    int      `json:"status"`
	Events    int      `json:"events"` // data events before [DONE]
	Done      bool     `json:"done"`
	LocalPort int      `json:"local_port"`
	SentNS    uint64   `json:"sent_ns"`  // before the request was made
	EventNS   []uint64 `json:"event_ns"` // as each event arrived
	EndNS     uint64   `json:"end_ns"`
}

// NodeClient POSTs body to url requests times, one after another on one
// keep-alive connection, with Node's https (or http) module, trusting
// caFile when it is set, and returns what it saw of each.
func NodeClient(ctx context.Context, url, caFile string, requests int, body string) ([]NodeResult, error) {
	node, err := findTool(NodeEnv, "node")
	if err != nil {
		return nil, err
	}
	return runClient(ctx, node, "stream_client.js", url, caFile, requests, body)
}

// ClientStartDelayEnv names the environment variable (milliseconds) that
// makes NodeClient and PythonClient wait before they connect.
const ClientStartDelayEnv = "TW_START_DELAY_MS"

// PythonClient is NodeClient with Python's http.client (and its ssl
// module, on the system's shared OpenSSL, for https).
func PythonClient(ctx context.Context, url, caFile string, requests int, body string) ([]NodeResult, error) {
	python, err := findPython("http.client, ssl")
	if err != nil {
		return nil, err
	}
	return runClient(ctx, python, "stream_client.py", url, caFile, requests, body)
}

// runClient runs the client script name (servers/) with interp and
// returns the results it printed, one JSON object per request.
func runClient(ctx context.Context, interp, name, url, caFile string, requests int, body string) ([]NodeResult, error) {
	dir, err := os.MkdirTemp("", "teststack-client-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	src, _ := files.ReadFile("servers/" + name)
	script := filepath.Join(dir, name)
	if err := os.WriteFile(script, src, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, interp, script, url, strconv.Itoa(requests), body)
	cmd.Env = append(os.Environ(), "TW_CA="+caFile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var out []NodeResult
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var r NodeResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return out, fmt.Errorf("%s: %q: %w", name, sc.Text(), err)
		}
		out = append(out, r)
	}
	if runErr != nil {
		return out, fmt.Errorf("%s: %v: %s", name, runErr, stderr.String())
	}
	return out, nil
}
