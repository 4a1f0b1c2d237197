package teststack

import (
	_ "embed"
	"encoding/json"
	"os"
	"path/filepath"
	"time"
)

const replayScript = "servers/replay_server.py"

// pythonCommon is the module the Python servers share (the app, the
// record, serving on uvicorn).
const pythonCommon = "servers/asgi_common.py"

//go:embed servers/replay_server.py
var replaySource []byte

// Replay is what a Python or Node stack streams for every POST when
// StackOptions.Replay is set: events handed to the server one at a time
// (each becomes one HTTP/1.1 chunk: one write from uvicorn, one writev of
// size line, CRLF, event and CRLF from Node, the first one behind the
// head), the first after Think, the others Interval apart. Its reports
// count Events as events.
type Replay struct {
	// MediaType is the response's Content-Type (text/event-stream,
	// application/x-ndjson).
	MediaType       string
	Events          []string
	Think, Interval time.Duration
	// Headers are more response headers, name and value, in order (a
	// gateway relaying its upstream's).
	Headers [][2]string
	// LastTick writes the last LastTick events and ends the response in
	// one tick, not each an interval after the one before: Node's http
	// module sends them in one writev with the terminator, as it does for
	// a handler that writes its usage event, [DONE] and ends at once. The
	// Node stacks only.
	LastTick int
}

// setUp writes r where the server reads it (TW_REPLAY in env).
func (r *Replay) setUp(dir string, env *[]string) error {
	b, err := json.Marshal(map[string]any{"media_type": r.MediaType, "events": r.Events,
		"think_ms": float64(r.Think) / 1e6, "interval_ms": float64(r.Interval) / 1e6, "headers": r.Headers,
		"last_tick": r.LastTick})
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "replay.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	*env = append(*env, "TW_REPLAY="+path)
	return nil
}
