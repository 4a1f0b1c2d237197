package main

import (
	"strings"
)

// tlsEntry reports whether a program is one of the TLS uprobes' entry
// programs: one run per SSL_read/SSL_write (or Go Read/Write) call.
func tlsEntry(prog string) bool {
	return strings.HasPrefix(prog, "tw_tls_") && !strings.HasSuffix(prog, "ret")
}

// tlsNs is the net ns of all TLS uprobe programs in one round.
func tlsNs(r kround) float64 {
	var ns float64
	for p, v := range r.ns {
		if strings.HasPrefix(p, "tw_tls_") {
			ns += v
		}
	}
	return ns
}

// tlsCalls is the TLS library calls the uprobes saw in one round.
func tlsCalls(r kround) float64 {
	var n float64
	for p, v := range r.runs {
		if tlsEntry(p) {
			n += v
		}
	}
	return n
}

// serverUsPerChunk is the server process's CPU per delivered chunk, in
// microseconds.
func serverUsPerChunk(r kround) float64 { return r.serverCPU / r.chunks * 1e6 }

// tlsLoad is how the report names a TLS load of kcost and its modes.
type tlsLoad struct {
	load, title, modes, label string
}

// tlsLoads are kcost's TLS loads: Python's ssl module on libssl (the
// OpenSSL API's probes, and a bystander of system-wide ones), and a Go
// server's crypto/tls.
var tlsLoads = []tlsLoad{
	{"tls", "TLS: the uprobes on the server's TLS library",
		"Modes: the default collector, whose uprobes read the plaintext (mode `tls`); the same collector with `streams.tls.enabled: false` (no uprobe; streams timed from TLS record headers, mode `opaque`); the empty programs; and a bystander: the shared libssl probed for every process (`streams.tls.system_wide`) while the server's port is not watched, so that its calls trap into uprobes that do not read them. ",
		"TLS uprobes"},
	{"gotls", "TLS in a Go server: the uprobes on crypto/tls",
		"Modes: the default collector, whose uprobes on `(*Conn).Read` and `(*Conn).Write` read the plaintext, and the same collector with `streams.tls.enabled: false` (no uprobe; streams timed from TLS record headers). A write call has its entry probe only, on the stack check's jump, which the kernel emulates; a read call also has one on each `RET`, which it single-steps. ",
		"Go TLS uprobes"},
}

// tlsCost compares a TLS load with the uprobes (mode tokenwire), without
// them (notls: the same collector timing TLS from record headers) and with
// the empty programs: what the uprobes cost per call and per chunk in BPF
// time, and in the server's own CPU, which also pays each uprobe's trap
// into the kernel (not in bpf stats).
func tlsCost(d *doc, data map[[2]string][]kround, tl tlsLoad, describe string) {
	tw, no, fl := data[[2]string{tl.load, "tokenwire"}], data[[2]string{tl.load, "notls"}], data[[2]string{tl.load, "floor"}]
	by := data[[2]string{tl.load, "bystander"}]
	if len(tw) == 0 || len(no) == 0 {
		return
	}
	d.p("### %s\n\n", tl.title)
	d.p("Load: %s. %s", describe, tl.modes)
	d.p("BPF figures are net of the idle windows; the server's CPU is its process's user+system time over the load, which includes each uprobe's trap into the kernel and back.\n\n")
	d.p("| mode | chunks per round | TLS calls per chunk | uprobe programs: ns per call | all programs: ns per chunk | server CPU: µs per chunk |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, m := range []struct {
		name string
		rs   []kround
	}{{"uprobes (default)", tw}, {"no uprobes (`tls.enabled: false`)", no}, {"bystander of system-wide uprobes", by}, {"empty programs", fl}} {
		if len(m.rs) == 0 {
			continue
		}
		calls, perCall := "-", "-"
		if m.rs[0].runs != nil && tlsCalls(m.rs[0]) > 0 {
			calls = each(m.rs, func(r kround) float64 { return tlsCalls(r) / r.chunks }).f(2)
			perCall = each(m.rs, func(r kround) float64 { return tlsNs(r) / tlsCalls(r) }).f(0)
		}
		d.p("| %s | %s | %s | %s | %s | %s |\n", m.name, each(m.rs, func(r kround) float64 { return r.chunks }).f(0), calls, perCall,
			each(m.rs, kround.perChunk).f(0), each(m.rs, serverUsPerChunk).f(1))
	}
	bpfAdded := byRound(tw, no, func(x, y kround) float64 { return x.perChunk() - y.perChunk() })
	cpuAdded := byRound(tw, no, func(x, y kround) float64 { return serverUsPerChunk(x) - serverUsPerChunk(y) })
	rel := byRound(tw, no, func(x, y kround) float64 { return serverUsPerChunk(x)/serverUsPerChunk(y) - 1 })
	d.p("\nPaired by round, the uprobes against no uprobes: BPF time %s ns per chunk; the server's CPU %s µs per chunk (%s of its CPU per chunk without them).\n\n",
		bpfAdded.f(0), cpuAdded.f(1), rel.pct())
	d.target(tl.label+": added BPF time per chunk (computed, no target)", bpfAdded.f(0)+" ns", "computed, no target", "1")
	d.target(tl.label+": added server CPU per chunk, traps included (computed, no target)", cpuAdded.f(1)+" µs ("+rel.pct()+")", "computed, no target", "1")
	if len(by) == 0 {
		return
	}
	byCPU := byRound(by, no, func(x, y kround) float64 { return serverUsPerChunk(x) - serverUsPerChunk(y) })
	byRel := byRound(by, no, func(x, y kround) float64 { return serverUsPerChunk(x)/serverUsPerChunk(y) - 1 })
	byCall := each(by, func(r kround) float64 { return tlsNs(r) / max(tlsCalls(r), 1) })
	d.p("A process that maps a system-wide file but whose calls are not read (the bystander) pays, paired by round against no uprobes: %s µs of its CPU per chunk (%s), the programs %s ns per call (they return after one map lookup); the rest is the traps.\n\n",
		byCPU.f(1), byRel.pct(), byCall.f(0))
	d.target("System-wide uprobes: a bystander's added CPU per chunk (computed, no target)", byCPU.f(1)+" µs ("+byRel.pct()+")", "computed, no target", "1")
}

// trapCost is bench/uprobetrap's BenchmarkUprobeTrap: what one uprobe
// costs the call it probes, by the kind of instruction it sits on.
func trapCost(d *doc) error {
	g, err := readGobench(d.runID)
	if err != nil {
		return err
	}
	get := func(c string) spread { return g.get("BenchmarkUprobeTrap/"+c, "ns/op") }
	none, ee, es, re, rs := get("none"), get("entry/emulated"), get("entry/stepped"), get("return/emulated"), get("return/stepped")
	if !none.ok() {
		return nil
	}
	d.p("What one uprobe costs the call it probes on this machine (`BenchmarkUprobeTrap`, bench/uprobetrap: ns per call of a four-instruction function, median [min-max] over the -count runs): nothing attached %s; an entry uprobe on an instruction the kernel emulates (a conditional jump, as Go's stack check ends: tokenwire's Go entry probes sit there) %s, on one it single-steps out of line (a load from the stack) %s; a return uprobe, which also sits on the function's first instruction: that instruction emulated %s, single-stepped %s. Single-stepping adds %.0f ns to an entry uprobe (difference of the medians).\n\n",
		none.f(1), ee.f(0), es.f(0), re.f(0), rs.f(0), es.Med-ee.Med)
	return nil
}
