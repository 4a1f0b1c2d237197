// Tools the Makefile runs with `go tool -modfile=internal/tools/go.mod`, in a
// module of their own so that their dependencies never reach the receiver's:
// mdatagen (make generate) and staticcheck (make lint).
//
// mdatagen is at v0.159.0, not at the collector's release v0.165.0: the
// module proxy answers 404 for go.opentelemetry.io/collector/cmd/mdatagen at
// v0.165.0 (and at v0.160.0, v0.162.0-v0.164.0, and for its version list);
// v0.161.0 is served but needs go.opentelemetry.io/collector/internal/schemagen
// v0.161.0, which the proxy refuses (403). v0.159.0's code for histogram
// metrics does not compile (it calls SetDoubleValue on a
// pmetric.HistogramDataPoint), so the receiver's histograms are declared in
// receiver/tokenwirereceiver/histograms.go rather than in metadata.yaml; the
// rest of its generated code compiles against collector v0.165.0.
module github.com/tokenwire/tokenwire/internal/tools

go 1.26.8

tool (
	go.opentelemetry.io/collector/cmd/mdatagen
	honnef.co/go/tools/cmd/staticcheck
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-viper/mapstructure/v2 v2.5.0 // indirect
	github.com/gobwas/glob v0.2.3 // indirect
	github.com/google/jsonschema-go v0.4.3 // indirect
	github.com/hashicorp/go-version v1.9.0 // indirect
	github.com/iimos/ucum v0.0.3 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/json-iterator/go v1.1.12 // indirect
	github.com/knadh/koanf/maps v0.1.3 // indirect
	github.com/knadh/koanf/providers/confmap v1.0.1 // indirect
	github.com/knadh/koanf/v2 v2.3.6 // indirect
	github.com/mitchellh/copystructure v1.2.0 // indirect
	github.com/mitchellh/reflectwalk v1.0.2 // indirect
	github.com/modern-go/concurrent v0.0.0-20180306012644-bacd9c7ef1dd // indirect
	github.com/modern-go/reflect2 v1.0.3-0.20250322232337-35a7c28c31ee // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	go.opentelemetry.io/collector/cmd/mdatagen v0.159.0 // indirect
	go.opentelemetry.io/collector/component v1.65.0 // indirect
	go.opentelemetry.io/collector/confmap v1.65.0 // indirect
	go.opentelemetry.io/collector/confmap/provider/fileprovider v1.65.0 // indirect
	go.opentelemetry.io/collector/featuregate v1.65.0 // indirect
	go.opentelemetry.io/collector/filter v0.159.0 // indirect
	go.opentelemetry.io/collector/internal/schemagen v0.159.0 // indirect
	go.opentelemetry.io/collector/pdata v1.65.0 // indirect
	go.opentelemetry.io/otel v1.45.0 // indirect
	go.opentelemetry.io/otel/metric v1.45.0 // indirect
	go.opentelemetry.io/otel/trace v1.45.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.41.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)
