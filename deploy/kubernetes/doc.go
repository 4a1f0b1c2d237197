// Package kubernetes holds the test of tokenwire's Kubernetes manifests
// (the *.yaml files in this directory, xdp/, operator/ and operator/xdp/).
//
// It is its own Go module so that k8s.io/api, which the test decodes the
// manifests into, does not become a dependency of the collector's module.
// Run it with `make k8s-test` (also part of `make e2e`):
//
//	cd deploy/kubernetes && go test ./...
//
// TOKENWIRE_COLLECTOR names the collector binary that validates the
// embedded collector configurations (default ../../_build/tokenwire); with
// TOKENWIRE_REQUIRE_COLLECTOR=1 a missing binary fails the test instead of
// skipping that part.
package kubernetes
