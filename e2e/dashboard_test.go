//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// panelQuery is one PromQL expression of the Grafana dashboard.
type panelQuery struct {
	Panel string // panel title
	RefID string
	Expr  string
}

// dashboardQueries returns every target expression of a Grafana dashboard
// JSON model, including those of panels nested in collapsed rows.
func dashboardQueries(path string) ([]panelQuery, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []panelQuery
	var walk func([]json.RawMessage) error
	walk = func(panels []json.RawMessage) error {
		for _, raw := range panels {
			var p struct {
				Title   string            `json:"title"`
				Panels  []json.RawMessage `json:"panels"`
				Targets []struct {
					RefID string `json:"refId"`
					Expr  string `json:"expr"`
				} `json:"targets"`
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				return err
			}
			for _, tg := range p.Targets {
				out = append(out, panelQuery{Panel: p.Title, RefID: tg.RefID, Expr: tg.Expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// grafanaExpr replaces the Grafana variables the dashboard uses with what
// Grafana would send for a range covering the test, and refuses any other
// variable (a query Prometheus would only see half-expanded).
func grafanaExpr(expr string, rateInterval time.Duration) (string, error) {
	s := strings.ReplaceAll(expr, "$__rate_interval", fmt.Sprintf("%ds", int(rateInterval.Seconds())))
	if strings.Contains(s, "$") {
		return "", fmt.Errorf("unknown Grafana variable in %q", expr)
	}
	return s, nil
}

// ruleGroup is a group of /api/v1/rules.
type ruleGroup struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Rules []struct {
		Name           string    `json:"name"`
		Type           string    `json:"type"` // alerting or recording
		Health         string    `json:"health"`
		LastError      string    `json:"lastError"`
		State          string    `json:"state"` // alerting rules: inactive, pending, firing
		LastEvaluation time.Time `json:"lastEvaluation"`
	} `json:"rules"`
}

// rules returns the rule groups Prometheus loaded.
func (c *promClient) rules() ([]ruleGroup, error) {
	data, err := c.get("/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	var d struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	return d.Groups, nil
}

// checkDashboard runs every PromQL expression of the Grafana dashboard:
// each must parse and return data for the test's workload (the XDP panels
// too: the overlay config puts the filter on the test's veth).
func checkDashboard(t *testing.T, prom *promClient, path string, window time.Duration) {
	queries, err := dashboardQueries(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 10 {
		t.Fatalf("%s: only %d queries found", path, len(queries))
	}
	for _, q := range queries {
		expr, err := grafanaExpr(q.Expr, window)
		if err != nil {
			t.Errorf("panel %q %s: %v", q.Panel, q.RefID, err)
			continue
		}
		res, err := prom.query(expr)
		switch {
		case err != nil:
			t.Errorf("panel %q %s: %v\n  %s", q.Panel, q.RefID, err, expr)
		case !hasData(res):
			t.Errorf("panel %q %s: no data: %v\n  %s", q.Panel, q.RefID, res, expr)
		default:
			t.Logf("panel %q %s: %d series", q.Panel, q.RefID, len(res))
		}
	}
}

// checkRules checks the example alert rules with promtool and in the
// running Prometheus: loaded, evaluated without error, none firing or
// pending on a healthy collector.
func checkRules(t *testing.T, prom *promClient, promBin, rulesFile string) {
	promtool := filepath.Join(filepath.Dir(promBin), "promtool")
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"check", "config", filepath.Join(filepath.Dir(rulesFile), "prometheus.yml")},
	} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		groups, err := prom.rules()
		if err != nil {
			t.Fatal(err)
		}
		var problems, notYet []string
		rules := 0
		for _, g := range groups {
			for _, r := range g.Rules {
				rules++
				switch {
				case r.LastEvaluation.IsZero() || r.Health == "unknown":
					notYet = append(notYet, r.Name)
				case r.Health != "ok":
					problems = append(problems, fmt.Sprintf("%s: health %s: %s", r.Name, r.Health, r.LastError))
				case r.Type == "alerting" && r.State != "inactive":
					problems = append(problems, fmt.Sprintf("%s: %s on a healthy collector", r.Name, r.State))
				}
			}
		}
		if rules == 0 {
			t.Fatalf("Prometheus loaded no rules from %s", rulesFile)
		}
		if len(notYet) == 0 || time.Now().After(deadline) {
			for _, p := range append(problems, notYet...) {
				t.Error(p)
			}
			t.Logf("%d rules evaluated", rules)
			return
		}
		time.Sleep(time.Second)
	}
}
