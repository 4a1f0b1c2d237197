//go:generate go tool -modfile=../../internal/tools/go.mod mdatagen metadata.yaml

// Package tokenwirereceiver is an OpenTelemetry Collector receiver that
// measures streaming AI services and TCP handshakes from the kernel with
// eBPF, with no change to the observed applications.
package tokenwirereceiver

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver/internal/metadata"
)

// NewFactory returns the factory of the tokenwire receiver.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		receiver.WithMetrics(createMetrics, metadata.MetricsStability),
		receiver.WithTraces(createTraces, metadata.TracesStability),
	)
}

// instances holds one receiver per component ID, so that a receiver used
// in a metrics and a traces pipeline loads its BPF programs once.
var instances = struct {
	sync.Mutex
	byID map[component.ID]*tokenwireReceiver
}{byID: map[component.ID]*tokenwireReceiver{}}

func instance(set receiver.Settings, cfg *Config) *tokenwireReceiver {
	instances.Lock()
	defer instances.Unlock()
	r, ok := instances.byID[set.ID]
	if !ok {
		r = newReceiver(set, cfg, func() {
			instances.Lock()
			defer instances.Unlock()
			delete(instances.byID, set.ID)
		})
		instances.byID[set.ID] = r
	}
	return r
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	r := instance(set, cfg.(*Config))
	r.setMetrics(next)
	return r.handle(), nil
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	r := instance(set, cfg.(*Config))
	r.setTraces(next)
	return r.handle(), nil
}
