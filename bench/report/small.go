package main

func memorySection(d *doc) error {
	_, ts, err := d.inputs("", "memory.csv", "bpf-maps.csv")
	if err != nil {
		return err
	}
	t, mt := ts[0], ts[1]
	d.p("## 5. Memory (bench/overhead, one measurement: no spread)\n\n| what | RSS MiB | HWM MiB | CPU, cores | note |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range t.Rows {
		d.p("| %s | %.1f | %.1f | %s | %s |\n", r["what"], num(r, "rss_bytes")/(1<<20), num(r, "hwm_bytes")/(1<<20), r["cpu_cores"], r["note"])
	}
	var total float64
	d.p("\nBPF maps the collector holds with the streams open (memlock from fdinfo):\n\n| map | type | max entries | memlock KiB |\n| --- | --- | --- | --- |\n")
	for _, r := range mt.Rows {
		d.p("| %s | %s | %s | %.1f |\n", r["name"], r["type"], r["max_entries"], num(r, "memlock_bytes")/1024)
		total += num(r, "memlock_bytes")
	}
	d.p("| **total** | | | **%.1f** |\n\nRaw: `bench/results/memory.csv`, `bench/results/bpf-maps.csv`.\n\n", total/1024)
	return nil
}

func accuracySection(d *doc) error {
	meta, ts, err := d.inputs("accuracy", "accuracy.csv")
	if err != nil {
		return err
	}
	t := ts[0]
	d.p("## 6. Accuracy of the stream probe (bench/streams, one round)\n\n")
	d.p("%s streams x %s events, %s apart, think %s; tokenwire's values from per-chunk records against the server's and the client's own clocks.\n\n",
		meta.Params["streams"], meta.Params["chunks"], meta.Params["interval"], meta.Params["think"])
	d.p("| error of tokenwire's value | p50 ms | p99 ms | max ms | n | streams matched |\n| --- | --- | --- | --- | --- | --- |\n")
	names := map[string]string{"ttft_vs_server": "TTFT vs server (handler start -> first write returned)",
		"ttft_vs_client": "TTFT vs client (request sent -> first event read)", "interval_vs_server": "chunk interval vs server (between write returns)"}
	for _, r := range t.Rows {
		d.p("| %s | %s | %s | %s | %s | %s of %s |\n", names[r["measure"]], r["p50_ms"], r["p99_ms"], r["max_ms"], r["n"], r["streams_matched"], r["streams"])
	}
	d.p("\nRaw: `bench/results/accuracy.csv`.\n\n")
	return nil
}
