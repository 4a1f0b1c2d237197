package grafana

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// TestDashboardSchema decodes tokenwire.json strictly: unknown fields,
// missing required fields and wrong types anywhere in the dashboard,
// including each panel's plugin options, are errors.
func TestDashboardSchema(t *testing.T) {
	b, err := os.ReadFile("tokenwire.json")
	if err != nil {
		t.Fatal(err)
	}
	// Panel options and queries decode by plugin type (timeseries,
	// heatmap, prometheus, ...) only once the plugins are registered.
	plugins.RegisterDefaultPlugins()
	//lint:ignore SA1019 tokenwire.json is in the classic dashboard JSON model (what Grafana provisions and imports); dashboardv2 is the schema of the newer v2 API, a different document
	var d dashboard.Dashboard
	err = d.UnmarshalJSONStrict(b)
	// v0.0.22 returns an empty cog.BuildErrors, not nil, on success.
	if be, ok := err.(cog.BuildErrors); ok && len(be) == 0 {
		err = nil
	}
	if err != nil {
		t.Fatalf("tokenwire.json does not match Grafana's dashboard schema:\n%v", err)
	}
	if d.Uid == nil || *d.Uid != "tokenwire" {
		t.Errorf("uid %v, want tokenwire (links and provisioning rely on it)", d.Uid)
	}
}

// TestStrictDecodingRejectsUnknownFields proves the schema check above
// catches a misplaced field.
func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	//lint:ignore SA1019 the same classic model as TestDashboardSchema decodes
	var d dashboard.Dashboard
	err := d.UnmarshalJSONStrict([]byte(`{"title": "x", "editable": true, "graphTooltip": 0, "panels": [], "schemaVersion": 39, "bogus": 1}`))
	if be, ok := err.(cog.BuildErrors); err == nil || ok && len(be) == 0 {
		t.Fatal("an unknown top-level field was accepted")
	}
}

// panel is what the checks below read of a panel.
type panel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource *datasourceRef    `json:"datasource"`
	Panels     []json.RawMessage `json:"panels"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// TestPanels checks what the schema cannot: unique panel IDs, and every
// query on the dashboard's Prometheus data source variable (so the
// dashboard works with whatever the importing user's data source is
// called) with a PromQL expression.
func TestPanels(t *testing.T) {
	b, err := os.ReadFile("tokenwire.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	ids := map[int]string{}
	queries := 0
	var walk func([]json.RawMessage)
	walk = func(raws []json.RawMessage) {
		for _, raw := range raws {
			var p panel
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panel id %d used by %q and %q", p.ID, other, p.Title)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" {
				if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no queries", p.Title)
				}
			}
			for _, tg := range p.Targets {
				queries++
				if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" {
					t.Errorf("panel %q: query %q without expr or refId", p.Title, tg.RefID)
				}
				if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q query %s: datasource %+v, want ${datasource}", p.Title, tg.RefID, tg.Datasource)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Fatal("no queries found")
	}
}
