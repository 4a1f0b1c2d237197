package main

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/tokenwire/tokenwire/bench/benchutil"
	"github.com/tokenwire/tokenwire/receiver/tokenwirereceiver"
)

// defaultRing is the receiver's default ring_buffer_size, from its factory,
// so that the verdict is about the default the code ships.
var defaultRing = tokenwirereceiver.NewFactory().CreateDefaultConfig().(*tokenwirereceiver.Config).RingBufferSize

func pipelineSection(d *doc) error {
	meta, ts, err := d.inputs("pipeline", "pipeline.csv")
	if err != nil {
		return err
	}
	t := ts[0]
	type key struct {
		ring   int
		stage  string
		target float64
	}
	by := map[key][]map[string]string{}
	var keys []key
	var rerun []map[string]string // attempts the bench ran again
	for _, r := range t.Rows {
		if r["kept"] != "true" {
			rerun = append(rerun, r)
			continue
		}
		ring, _ := strconv.Atoi(r["ring_bytes"])
		k := key{ring, r["stage"], num(r, "target_per_s")}
		if by[k] == nil {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.stage != b.stage {
			return compareStr(a.stage, b.stage)
		}
		if a.ring != b.ring {
			return a.ring - b.ring
		}
		return int(a.target - b.target)
	})
	f := func(rows []map[string]string, g func(map[string]string) float64) spread {
		var v []float64
		for _, r := range rows {
			v = append(v, g(r))
		}
		return spreadOf(v)
	}
	d.p("## 3. Record pipeline (bench/pipeline)\n\n")
	d.p("A bench-only BPF producer (`bench/pipeline/producer.bpf.c`, BPF_PROG_TEST_RUN, %s records per call, paced, pinned to CPU 0) writes stream records in the real layouts into the real stream tracer's ring buffer; one reader thread on CPU 1 runs the real read loop (`stream.Tracer.Read`) and the receiver's aggregation (`internal/streamagg`), whole streams of 4 records, %s in flight: ", meta.Params["batch"], meta.Params["inflight_streams"])
	d.p("*metrics* (snapshots every %s) and *spans* (also one span per stream, the receiver's default, taken every %s; as in the receiver, at most `streams.max_pending_spans` = %s wait between takes and the spans of further streams are dropped and counted, their records still aggregated). %s per step; ring sizes interleaved in each repeat. Records are %s bytes (request, response) or %s (progress, end) in the ring. ",
		meta.Params["interval"], meta.Params["interval"], meta.Params["max_pending_spans"], meta.Params["step"], meta.Params["payload_record_bytes"], meta.Params["stats_record_bytes"])
	d.p("Lost = reservations the producer could not make (ring full). A step counts as evidence at its target only if the producer reached %.0f%% of it. ", 100*benchutil.ProducerReach)
	d.p("A step up to %s records/s whose producer lost nothing but fell short was run again, up to %s times; a step that lost records never was. ", meta.Params["retry_up_to"], meta.Params["retries"])
	if len(rerun) == 0 {
		d.p("No step was run again in this run.\n\n")
	} else {
		were := "attempts were"
		if len(rerun) == 1 {
			were = "attempt was"
		}
		d.p("%d %s run again (every attempt is in the CSV, `kept` = false); the tables and verdicts read the last attempt of each step. Run again: ", len(rerun), were)
		for i, r := range rerun {
			sep := "; "
			if i == len(rerun)-1 {
				sep = ".\n\n"
			}
			d.p("repeat %s, %s KiB, %s, target %s: %.0f/s%s", r["repeat"], strconv.Itoa(int(num(r, "ring_bytes"))>>10), r["stage"], r["target_per_s"], num(r, "produced_per_s"), sep)
		}
	}
	d.p("| stage | ring KiB | target records/s | produced/s | lost %% | reader ns/record | spans dropped %% | allocs/record (whole process) | other processes, cores |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, k := range keys {
		rs := by[k]
		dropped := "-"
		if k.stage == "spans" {
			dropped = f(rs, func(r map[string]string) float64 {
				return 100 * num(r, "spans_dropped") / max(num(r, "spans_kept")+num(r, "spans_dropped"), 1)
			}).f(1)
		}
		d.p("| %s | %d | %.0f | %s | %s | %s | %s | %s | %s |\n", k.stage, k.ring>>10, k.target,
			f(rs, func(r map[string]string) float64 { return num(r, "produced_per_s") }).f(0),
			f(rs, func(r map[string]string) float64 { return 100 * num(r, "lost") / max(num(r, "produced"), 1) }).f(3),
			f(rs, func(r map[string]string) float64 { return num(r, "reader_ns_per_record") }).f(0),
			dropped,
			f(rs, func(r map[string]string) float64 { return num(r, "allocs_per_record") }).f(4),
			f(rs, func(r map[string]string) float64 { return num(r, "others_cores") }).f(2))
	}
	d.p("\n")
	// Lossless at 1M records/s: every repeat of every step up to 1M
	// without loss, and the producer at 95% of each target.
	var rings []int
	for _, k := range keys {
		if !slices.Contains(rings, k.ring) {
			rings = append(rings, k.ring)
		}
	}
	slices.Sort(rings)
	for _, stage := range []string{"spans", "metrics"} {
		smallest := 0
		for _, ring := range rings {
			lossy, short, steps := 0, 0, 0
			for _, k := range keys {
				if k.ring != ring || k.stage != stage || k.target <= 0 || k.target > 1e6 {
					continue
				}
				for _, r := range by[k] {
					steps++
					if num(r, "lost") > 0 {
						lossy++
					}
					if benchutil.ProducerShort(num(r, "produced_per_s"), k.target) {
						short++
					}
				}
			}
			if steps == 0 {
				continue
			}
			v := "**met**"
			switch {
			case lossy > 0:
				v = fmt.Sprintf("**missed**: %d of %d steps lost records", lossy, steps)
			case short > 0:
				v = fmt.Sprintf("not shown: in %d of %d steps the producer fell short of its target", short, steps)
			}
			if lossy == 0 && short == 0 && smallest == 0 {
				smallest = ring
			}
			def := ""
			if ring == defaultRing {
				def = " (the receiver's default)"
			}
			d.p("- %s, %d KiB ring%s: zero loss at every step up to 1M records/s in every repeat: %s.\n", stage, ring>>10, def, v)
			measured := fmt.Sprintf("%d of %d steps lossy", lossy, steps)
			if stage == "spans" && ring == defaultRing {
				var dropped, kept float64
				for _, k := range keys {
					if k.ring == ring && k.stage == stage && k.target > 0 && k.target <= 1e6 {
						for _, r := range by[k] {
							dropped += num(r, "spans_dropped")
							kept += num(r, "spans_kept")
						}
					}
				}
				share := 100 * dropped / max(kept+dropped, 1)
				d.p("  Over those steps %.0f spans were kept and %.0f dropped for `streams.max_pending_spans` (%.1f%%): every stream has its span while at most %s streams end per %s.\n",
					kept, dropped, share, meta.Params["max_pending_spans"], meta.Params["interval"])
				measured += fmt.Sprintf("; %.1f%% of spans dropped for streams.max_pending_spans", share)
			}
			if ring == defaultRing {
				d.target(fmt.Sprintf("pipeline lossless up to 1M records/s with the default %d KiB ring (%s stage)", defaultRing>>10, stage),
					measured, v, "3")
			}
		}
		if smallest > 0 {
			d.p("- **smallest ring lossless up to 1M records/s in every repeat, %s stage: %d KiB.**\n", stage, smallest>>10)
		} else {
			d.p("- no ring size was lossless up to 1M records/s in every repeat for the %s stage.\n", stage)
		}
	}
	d.p("\nAllocations per record here are the whole process's (pdata builds and the producer's test-run calls included); the aggregation's own are in the Go benchmarks below.\n\n")
	if err := goBenchAllocs(d); err != nil {
		return err
	}
	d.p("Raw: `bench/results/pipeline.csv`, `bench/results/gobench.txt`.\n\n")
	return nil
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
