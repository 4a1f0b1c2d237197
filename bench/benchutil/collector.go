package benchutil

// The ocb-built collector as the benchmarks run it: the default pipeline
// file unchanged but for an overlay that moves its listening ports away
// from the defaults (other collectors on the host may hold them), turns
// log sampling off (so that every debug-exporter line is written) and
// points stream tracking at the benchmark server's port; or, for the
// interceptor variants, an otlp receiver in place of tokenwire.

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// Collector says how to run the collector.
type Collector struct {
	Bin, Config string // the ocb-built binary and the default pipeline file
	Dir         string // where overlays and logs go
	// Ports it listens on, 127.0.0.1 only.
	TelemetryPort, PromPort, HealthPort, OTLPPort int
	// Overlay, when set, is one more configuration file's YAML, given
	// last (a variant's settings).
	Overlay string
}

// DefaultCollector uses ports away from the collector's defaults (8888,
// 8889, 13133, 4317).
func DefaultCollector(bin, config, dir string) Collector {
	return Collector{Bin: bin, Config: config, Dir: dir, TelemetryPort: 18888, PromPort: 18889, HealthPort: 23133, OTLPPort: 14317}
}

// CollectorFlags are the -collector and -config flags of a bench command
// that runs the collector.
type CollectorFlags struct{ bin, config *string }

// RegisterCollectorFlags defines -collector and -config on the command
// line.
func RegisterCollectorFlags() CollectorFlags {
	return CollectorFlags{
		bin:    flag.String("collector", "_build/tokenwire", "the ocb-built collector"),
		config: flag.String("config", "config.yaml", "the collector's default pipeline"),
	}
}

// Config is the -config flag's value.
func (f CollectorFlags) Config() string { return *f.config }

// Check fails when the -collector binary is not there.
func (f CollectorFlags) Check() error {
	if _, err := os.Stat(*f.bin); err != nil {
		return fmt.Errorf("collector %s: %w (run make build)", *f.bin, err)
	}
	return nil
}

// Collector is DefaultCollector with the flags' binary and config.
func (f CollectorFlags) Collector(dir string) Collector {
	return DefaultCollector(*f.bin, *f.config, dir)
}

// Ports are the ports that must be free before a collector starts.
func (c Collector) Ports() []int {
	return []int{c.TelemetryPort, c.PromPort, c.HealthPort, c.OTLPPort}
}

// OTLPEndpoint is where the otlp variant listens.
func (c Collector) OTLPEndpoint() string { return fmt.Sprintf("127.0.0.1:%d", c.OTLPPort) }

// Args writes the overlays for a collector that tracks streams on
// streamPort (otlp: with an otlp receiver in place of tokenwire) and
// returns the collector's command-line arguments.
func (c Collector) Args(streamPort int, otlp bool) ([]string, error) {
	ports := fmt.Sprintf(`receivers:
  tokenwire:
    streams:
      ports: [%d]
exporters:
  prometheus:
    endpoint: 127.0.0.1:%d
extensions:
  health_check:
    endpoint: 127.0.0.1:%d
service:
`, streamPort, c.PromPort, c.HealthPort) + teststack.CollectorTelemetry(c.TelemetryPort, "", "  ")
	pf := filepath.Join(c.Dir, fmt.Sprintf("ports-%d.yaml", streamPort))
	if err := os.WriteFile(pf, []byte(ports), 0o644); err != nil {
		return nil, err
	}
	args := []string{"--config", c.Config, "--config", pf}
	if c.Overlay != "" {
		vf := filepath.Join(c.Dir, fmt.Sprintf("variant-%d.yaml", streamPort))
		if err := os.WriteFile(vf, []byte(c.Overlay), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--config", vf)
	}
	if otlp {
		of := filepath.Join(c.Dir, "otlp.yaml")
		o := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
service:
  pipelines:
    metrics:
      receivers: [otlp]
    traces:
      receivers: [otlp]
`, c.OTLPEndpoint())
		if err := os.WriteFile(of, []byte(o), 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--config", of)
	}
	return args, nil
}

// Start starts the collector in g, waits until its health check answers
// and checks that it holds BPF programs exactly when it should (tokenwire:
// yes; otlp: no, or tokenwire is in another pipeline of the config). Its
// log is a file of its own (Proc.LogPath). On failure its last lines go to
// logs.
func (c Collector) Start(g *teststack.Group, streamPort int, otlp bool, logs io.Writer) (*teststack.Proc, error) {
	args, err := c.Args(streamPort, otlp)
	if err != nil {
		return nil, err
	}
	if err := teststack.WaitPortsFree(c.Ports(), 2*time.Minute); err != nil {
		return nil, err
	}
	log, err := os.CreateTemp(c.Dir, "collector-*.log")
	if err != nil {
		return nil, err
	}
	log.Close()
	p, err := g.Start(teststack.ProcOptions{Name: "collector", LogPath: log.Name()}, c.Bin, args...)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*teststack.Proc, error) {
		p.Stop()
		fmt.Fprintln(logs, p.Tail(60))
		return nil, err
	}
	if err := p.WaitReady(60*time.Second, "healthy health check", teststack.HTTPOK(fmt.Sprintf("http://127.0.0.1:%d/", c.HealthPort))); err != nil {
		return fail(err)
	}
	time.Sleep(time.Second) // let the receiver settle after Start
	if done, werr := p.Exited(); done {
		return fail(fmt.Errorf("collector exited after start: %v", werr))
	}
	ps, err := Programs(p.Pid())
	if err != nil {
		return fail(fmt.Errorf("collector's BPF programs: %w", err))
	}
	if !otlp && len(ps) == 0 {
		return fail(errors.New("the tokenwire collector holds no BPF programs"))
	}
	if otlp && len(ps) > 0 {
		return fail(fmt.Errorf("the otlp collector holds %d BPF programs: is tokenwire in another pipeline of %s?", len(ps), c.Config))
	}
	return p, nil
}

// Telemetry returns the sum over its series of the collector's own metric
// name, read from its Prometheus telemetry endpoint (names as the overlay
// has them: no type or unit suffix). A name the endpoint does not show is
// an error.
func (c Collector) Telemetry(name string) (float64, error) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", c.TelemetryPort))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("collector telemetry: %s", resp.Status)
	}
	var sum float64
	seen := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(fields) == 0 {
			return 0, fmt.Errorf("collector telemetry: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("collector telemetry: %q: %w", line, err)
		}
		sum += v
		seen = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !seen {
		return 0, fmt.Errorf("collector telemetry has no %s", name)
	}
	return sum, nil
}
