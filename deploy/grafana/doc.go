// Package grafana holds the test of tokenwire's Grafana dashboard,
// tokenwire.json: it decodes strictly against Grafana's dashboard schema
// (the Grafana Foundation SDK's generated types, with every panel plugin's
// options), so a misspelt or misplaced field fails before anyone imports it.
//
// Its own Go module, so that the SDK stays out of the collector's module.
// The dashboard's PromQL is checked against a real Prometheus by the e2e
// test (e2e/, `make e2e`). Run this with `make grafana-test`:
//
//	cd deploy/grafana && go test ./...
package grafana
