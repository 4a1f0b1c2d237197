package teststack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StackOptions parameterise a Python or Node server; zero values take the
// servers' defaults (openai format, 10 events, think 20 ms, interval
// 10 ms, a free port). Requests can override events, think and interval
// with the query parameters events, think_ms and interval_ms.
type StackOptions struct {
	Port     int
	Format   Format
	Events   int
	Think    time.Duration
	Interval time.Duration
	// Dir holds the server's source and log; default: a new temporary
	// directory, removed by Stop.
	Dir string
	// TLS, when set, serves HTTPS with this certificate (uvicorn's
	// --ssl-certfile/--ssl-keyfile; Node's https module).
	TLS *TLSCert
	// Replay streams these events instead of the server's own: another
	// server's bytes, handed to uvicorn as that server hands them
	// (servers/replay_server.py), or relayed by a Node server
	// (servers/stream_server.js).
	Replay *Replay
}

// StackServer is a running Python or Node server (a child process).
type StackServer struct {
	Stack Stack
	Port  int
	Addr  string // 127.0.0.1:port
	URL   string // http://127.0.0.1:port (https:// with TLS)
	Proc  *Proc
	// Ready is the server's first line: port, framework, format and the
	// versions it runs on.
	Ready   map[string]any
	tempDir string // ours to remove
}

// Report is one request as a Python or Node server reports it on stdout
// when the response is over: what the app handed to the server, without
// the chunked framing the server adds.
type Report struct {
	Path         string   `json:"path"`
	Model        string   `json:"model"`
	Streamed     bool     `json:"streamed"`
	UserAgent    string   `json:"user_agent"`
	RequestBytes int      `json:"request_bytes"`
	Events       int      `json:"events"`
	BodyBytes    int      `json:"body_bytes"`
	Done         bool     `json:"done"` // the end marker went out
	StartNS      uint64   `json:"start_ns"`
	EventNS      []uint64 `json:"event_ns"` // CLOCK_MONOTONIC, as each event was handed over
	EndNS        uint64   `json:"end_ns"`
}

// stackReadyTimeout bounds a server's start: FastAPI's imports alone take
// seconds on a busy 2-core machine.
const stackReadyTimeout = 60 * time.Second

// StartStack starts a server of the given stack on 127.0.0.1 and waits
// for its ready line.
func StartStack(s Stack, opts StackOptions) (*StackServer, error) {
	tool, err := stackTool(s)
	if err != nil {
		return nil, err
	}
	srv := &StackServer{Stack: s}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "teststack-"+string(s)+"-"); err != nil {
			return nil, err
		}
		srv.tempDir = dir
	}
	script := "servers/stream_server.js"
	env := []string{"TW_FRAMEWORK=" + s.framework()}
	if s.python() {
		script = "servers/stream_server.py"
	} else if s == StackExpress {
		modules, err := NodeModules()
		if err != nil {
			return nil, srv.cleanup(err)
		}
		env = append(env, "NODE_PATH="+modules)
	}
	src, _ := files.ReadFile(script)
	if opts.Replay != nil {
		if err = opts.Replay.setUp(dir, &env); err != nil {
			return nil, srv.cleanup(err)
		}
		if s.python() {
			src, script = replaySource, replayScript
		}
	}
	path := filepath.Join(dir, filepath.Base(script))
	if err := os.WriteFile(path, src, 0o644); err != nil {
		return nil, srv.cleanup(err)
	}
	if s.python() { // both Python servers import it from their directory
		common, _ := files.ReadFile(pythonCommon)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(pythonCommon)), common, 0o644); err != nil {
			return nil, srv.cleanup(err)
		}
	}
	env = append(env, opts.env()...)
	srv.Proc, err = StartProc(ProcOptions{Name: string(s), Dir: dir, Env: env, Lines: true, Grace: 5 * time.Second,
		LogPath: filepath.Join(dir, string(s)+".log")}, tool, path)
	if err != nil {
		return nil, srv.cleanup(err)
	}
	line, err := srv.Proc.WaitLine(stackReadyTimeout, func(l string) bool { return strings.Contains(l, `"ready":`) })
	if err == nil {
		err = json.Unmarshal([]byte(line), &srv.Ready)
	}
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("%s did not start: %w", s, err)
	}
	port, _ := srv.Ready["port"].(float64)
	srv.Port = int(port)
	srv.Addr = "127.0.0.1:" + strconv.Itoa(srv.Port)
	srv.URL = "http://" + srv.Addr
	if opts.TLS != nil {
		srv.URL = "https://" + srv.Addr
	}
	return srv, nil
}

// ServeStack starts a server of the given stack for the test (skipping or
// failing as RequireStack says when the stack is missing) and stops it in
// the test's cleanup, printing its output's tail when the test failed.
func ServeStack(tb testing.TB, s Stack, opts StackOptions) *StackServer {
	tb.Helper()
	RequireStack(tb, s)
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	srv, err := StartStack(s, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%s: pid %d on %s: %v", s, srv.Proc.Pid(), srv.Addr, srv.Ready)
	tb.Cleanup(func() {
		early := srv.Proc.exitBeforeStop()
		if err := srv.Stop(); err != nil {
			tb.Error(err)
		}
		if tb.Failed() {
			tb.Logf("%s: %s; last lines of its output:\n%s", s, early, srv.Proc.Tail(40))
		}
	})
	return srv
}

func (o StackOptions) env() []string {
	var env []string
	add := func(k, v string) { env = append(env, k+"="+v) }
	add("TW_PORT", strconv.Itoa(o.Port))
	if o.Format != "" {
		add("TW_FORMAT", string(o.Format))
	}
	if o.Events > 0 {
		add("TW_EVENTS", strconv.Itoa(o.Events))
	}
	if o.Think > 0 {
		add("TW_THINK_MS", strconv.FormatFloat(float64(o.Think)/1e6, 'f', -1, 64))
	}
	if o.Interval > 0 {
		add("TW_INTERVAL_MS", strconv.FormatFloat(float64(o.Interval)/1e6, 'f', -1, 64))
	}
	if o.TLS != nil {
		add("TW_TLS_CERT", o.TLS.CertFile)
		add("TW_TLS_KEY", o.TLS.KeyFile)
	}
	return env
}

// Reports waits at most timeout until n requests have been reported and
// returns every report so far, in the order the responses ended.
func (s *StackServer) Reports(n int, timeout time.Duration) ([]Report, error) {
	isReport := func(l string) bool { return strings.HasPrefix(l, "{") && !strings.Contains(l, `"ready":`) }
	lines, err := s.Proc.WaitLines(timeout, n, isReport)
	out := make([]Report, 0, len(lines))
	for _, l := range lines {
		var r Report
		if jerr := json.Unmarshal([]byte(l), &r); jerr != nil {
			return out, fmt.Errorf("%s: report %q: %w", s.Stack, l, jerr)
		}
		out = append(out, r)
	}
	return out, err
}

// Stop stops the server (see Proc.Stop) and removes its temporary
// directory.
func (s *StackServer) Stop() error {
	var err error
	if s.Proc != nil {
		err = s.Proc.Stop()
	}
	return s.cleanup(err)
}

func (s *StackServer) cleanup(err error) error {
	if s.tempDir != "" {
		os.RemoveAll(s.tempDir)
		s.tempDir = ""
	}
	return err
}
