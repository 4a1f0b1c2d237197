package main

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/bpf"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver"
)

func rate(n uint64, secs float64) float64 { return float64(n) / secs }

// write writes pipeline.csv, one row per attempt of each step, and the
// section's meta (record sizes, the receiver defaults it was run against).
func write(res *benchutil.Results, steps []step) error {
	var rows [][]string
	for _, s := range steps {
		rows = append(rows, []string{strconv.Itoa(s.repeat), strconv.Itoa(s.attempt), strconv.FormatBool(s.kept), strconv.Itoa(s.ring), s.stage, fmt.Sprintf("%.0f", s.target), fmt.Sprintf("%.3f", s.seconds),
			strconv.FormatUint(s.produced, 10), strconv.FormatUint(s.lost, 10), strconv.FormatUint(s.consumed, 10),
			fmt.Sprintf("%.0f", rate(s.produced, s.seconds)), fmt.Sprintf("%.0f", rate(s.consumed, s.seconds)),
			strconv.FormatUint(s.mallocs, 10), fmt.Sprintf("%.4f", s.allocsPerRecord()), strconv.FormatUint(s.readerNs, 10),
			strconv.FormatUint(s.waitNs, 10), fmt.Sprintf("%.1f", s.readerNsPerRecord()), strconv.FormatUint(s.builds, 10),
			fmt.Sprintf("%.3f", s.host.OthersCores), strconv.FormatUint(s.spansKept, 10), strconv.FormatUint(s.spansDropped, 10)})
	}
	if err := res.WriteCSV("pipeline.csv", []string{"repeat", "attempt", "kept", "ring_bytes", "stage", "target_per_s", "seconds", "produced", "lost", "consumed",
		"produced_per_s", "consumed_per_s", "mallocs", "allocs_per_record", "reader_cpu_ns", "reader_wait_ns", "reader_ns_per_record",
		"metrics_builds", "others_cores", "spans_kept", "spans_dropped"}, rows); err != nil {
		return err
	}
	return res.WriteMeta(map[string]string{
		"max_pending_spans": strconv.Itoa(tokenwirereceiver.DefaultMaxPendingSpans),
		"retries":           strconv.Itoa(*retries), "retry_up_to": fmt.Sprintf("%.0f", *retryUpTo),
		"batch": strconv.Itoa(*batch), "step": stepDur.String(), "interval": interval.String(), "inflight_streams": strconv.Itoa(1 << *inflight),
		"stats_record_bytes":   strconv.Itoa(int(unsafe.Sizeof(bpf.StreamStreamStats{})) + 8),
		"payload_record_bytes": strconv.Itoa(int(unsafe.Sizeof(bpf.StreamStreamPayload{})) + 8),
	})
}
