//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tokenwire/tokenwire/internal/teststack"
)

// promClient queries Prometheus's HTTP API (/api/v1), the way Grafana and
// users' scripts do.
type promClient struct {
	base string // http://127.0.0.1:port
	hc   *http.Client
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string
	Value  float64
}

// apiResponse is the envelope of every /api/v1 answer.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

// get calls an /api/v1 endpoint and returns its data, or the API's error
// (a PromQL parse error comes back as errorType "bad_data"). Queries go as
// POST forms (no URL length limit, as Grafana sends them); other endpoints
// are GET only.
func (c *promClient) get(path string, form url.Values) (json.RawMessage, error) {
	var (
		resp *http.Response
		err  error
	)
	if form != nil {
		resp, err = c.hc.PostForm(c.base+path, form)
	} else {
		resp, err = c.hc.Get(c.base + path)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %s: undecodable answer %.200q: %w", path, resp.Status, body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// query runs an instant query at the current time. Scalars come back as a
// single sample without labels.
func (c *promClient) query(expr string) ([]sample, error) {
	data, err := c.get("/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	switch d.ResultType {
	case "vector":
		var raw []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &raw); err != nil {
			return nil, err
		}
		out := make([]sample, 0, len(raw))
		for _, r := range raw {
			v, err := parseValue(r.Value[1])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", expr, err)
			}
			out = append(out, sample{Metric: r.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var raw [2]any
		if err := json.Unmarshal(d.Result, &raw); err != nil {
			return nil, err
		}
		v, err := parseValue(raw[1])
		if err != nil {
			return nil, err
		}
		return []sample{{Value: v}}, nil
	default:
		return nil, fmt.Errorf("%s: result type %q, want vector or scalar", expr, d.ResultType)
	}
}

// parseValue reads Prometheus's string-encoded sample values ("NaN" and
// "+Inf" included).
func parseValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	return strconv.ParseFloat(s, 64)
}

// scalar runs expr, which must return exactly one sample, and returns its
// value.
func (c *promClient) scalar(expr string) (float64, error) {
	s, err := c.query(expr)
	if err != nil {
		return 0, err
	}
	if len(s) != 1 {
		return 0, fmt.Errorf("%s: %d samples, want 1: %v", expr, len(s), s)
	}
	return s[0].Value, nil
}

// waitValue polls expr until it returns want (a single sample), failing
// the test after timeout. The collector emits every collection_interval
// (10 s in config.yaml) and Prometheus scrapes every second, so a value
// shows up within about 11 s of the event.
func (c *promClient) waitValue(t *testing.T, expr string, want float64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, err := c.scalar(expr)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %s: got %v (err %v), want %v", expr, timeout, got, err, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// hasData reports whether a result holds at least one finite value: an
// empty vector or only NaN (histogram_quantile over zero rates) is "no data"
// on a dashboard panel.
func hasData(s []sample) bool {
	for _, x := range s {
		if !math.IsNaN(x.Value) && !math.IsInf(x.Value, 0) {
			return true
		}
	}
	return false
}

// prometheusConfig is the config the test's Prometheus runs with: a 1 s
// scrape of the collector's prometheus exporter (the metrics) and of its
// own telemetry (tokenwire's self-telemetry), with the example alert rules.
// Job names are those of examples/prometheus/prometheus.yml. Nothing in it
// reaches beyond 127.0.0.1: static targets only, no Alertmanager, no
// remote write.
func prometheusConfig(rulesFile string) string {
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: tokenwire
    static_configs:
      - targets: ["127.0.0.1:8889"]
  - job_name: tokenwire-self
    static_configs:
      - targets: ["127.0.0.1:8888"]
`, rulesFile)
}

// startPrometheus runs Debian's Prometheus on a free 127.0.0.1 port with
// its data under dir and waits until it is ready.
func startPrometheus(t *testing.T, dir, bin, rulesFile string) *promClient {
	t.Helper()
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(prometheusConfig(rulesFile)), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	p := startProc(t, dir, "prometheus", nil, bin,
		"--config.file="+cfg,
		"--web.listen-address="+addr,
		"--storage.tsdb.path="+filepath.Join(dir, "prometheus-data"),
		"--storage.tsdb.retention.time=1h",
		// Debian's defaults point these at /etc/prometheus; the test
		// needs no consoles.
		"--web.console.templates="+dir,
		"--web.console.libraries="+dir,
		"--log.level=info",
	)
	c := &promClient{base: "http://" + addr, hc: &http.Client{Timeout: 10 * time.Second}}
	waitReady(t, p, 30*time.Second, "ready endpoint", teststack.HTTPOK(c.base+"/-/ready"))
	return c
}

// selector renders a label matcher list, e.g. {a="x",b="y"}.
func selector(labels ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", labels[i], labels[i+1])
	}
	b.WriteByte('}')
	return b.String()
}
