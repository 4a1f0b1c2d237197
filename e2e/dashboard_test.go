//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
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
