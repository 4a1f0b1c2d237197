// Package e2e holds the end-to-end test of tokenwire in a user's stack: the
// ocb-built collector with the default config.yaml (plus a traces exporter
// and the XDP filter on a veth pair of the test's own), a real Prometheus
// (Debian's prometheus package) scraping it, a second collector receiving
// tokenwire's spans over OTLP, the Grafana dashboard's queries and the
// example alert rules, all against a workload with known timing: SSE
// streams, TCP handshakes (fast, refused, one SYN retransmission) and
// frames for the XDP filter.
//
// The tests carry the build tag e2e, so `go test ./...` does not run them:
// they need root, the built collector and Prometheus, and take about a
// minute. Run them with `make e2e`, which builds and installs what they need:
//
//	make e2e    # = make build k8s-test && go test -tags e2e -count=1 ./e2e/
//
// Environment:
//
//	TOKENWIRE_COLLECTOR   collector binary (default ../_build/tokenwire)
//	TOKENWIRE_PROMETHEUS  prometheus binary (default: prometheus on PATH)
package e2e
