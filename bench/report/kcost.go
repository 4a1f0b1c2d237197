package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// kround is one load, mode and round of kcost.csv, net of the host's
// background (the idle windows around the load, scaled to its length).
type kround struct {
	round           int
	chunks          float64
	bytes           float64
	total           float64            // net ns of all programs
	gross           float64            // ns of all programs, background included
	ns, runs        map[string]float64 // net, by program
	hook            map[string]string
	others, seconds float64
	serverCPU       float64 // the server process's CPU seconds; -1: not measured
	// tailsFromUser is the collector's count of body writes whose last
	// bytes its programs read from the server's memory; -1: no collector;
	// NaN: not recorded.
	tailsFromUser float64
}

func (k kround) perChunk() float64 { return k.total / k.chunks }

func loadKcost(runID string) (map[[2]string][]kround, error) {
	t, err := benchutil.ReadCSV(*resultsDir, "kcost.csv", runID)
	if err != nil {
		return nil, err
	}
	idx := map[[2]string]map[int]*kround{}
	for _, r := range t.Rows {
		k := [2]string{r["load"], r["mode"]}
		if idx[k] == nil {
			idx[k] = map[int]*kround{}
		}
		rn := int(num(r, "round"))
		kr := idx[k][rn]
		if kr == nil {
			kr = &kround{round: rn, chunks: num(r, "chunks"), bytes: num(r, "chunk_bytes"), ns: map[string]float64{},
				runs: map[string]float64{}, hook: map[string]string{}, others: num(r, "others_cores"), seconds: num(r, "seconds"),
				serverCPU: num(r, "server_cpu_seconds"), tailsFromUser: num(r, "tails_from_user")}
			idx[k][rn] = kr
		}
		scale := num(r, "seconds") / num(r, "idle_seconds")
		if math.IsNaN(scale) || math.IsInf(scale, 0) {
			scale = 0
		}
		ns := max(num(r, "run_ns")-num(r, "idle_run_ns")*scale, 0)
		runs := max(num(r, "run_cnt")-num(r, "idle_run_cnt")*scale, 0)
		p := r["program"]
		kr.ns[p] += ns
		kr.runs[p] += runs
		kr.hook[p] = r["hook"]
		kr.total += ns
		kr.gross += num(r, "run_ns")
	}
	out := map[[2]string][]kround{}
	for k, m := range idx {
		for _, v := range m {
			out[k] = append(out[k], *v)
		}
		slices.SortFunc(out[k], func(a, b kround) int { return a.round - b.round })
	}
	return out, nil
}

// byRound pairs two series by round.
func byRound(a, b []kround, f func(x, y kround) float64) spread {
	var v []float64
	for _, x := range a {
		for _, y := range b {
			if x.round == y.round {
				v = append(v, f(x, y))
			}
		}
	}
	return spreadOf(v)
}

func each(rs []kround, f func(kround) float64) spread {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return spreadOf(v)
}

// hookNsPerRun is prog's net ns per run in one round; NaN (not measured
// in that round) when no net run is left once the idle background is
// subtracted, which a program that runs a few times per stream can meet
// on the sparse load.
func hookNsPerRun(r kround, prog string) float64 {
	if r.runs[prog] <= 0 {
		return math.NaN()
	}
	return r.ns[prog] / r.runs[prog]
}

func kcostSection(d *doc) error {
	data, err := loadKcost(d.runID)
	if err != nil {
		return err
	}
	meta, err := benchutil.ReadMeta(*resultsDir, "kcost", d.runID)
	if err != nil {
		return err
	}
	d.p("## 1. Kernel cost per delivered chunk (bench/kcost)\n\n")
	d.p("All BPF programs of the collector running the default pipeline (`config.yaml`, stream tracking on the server's port), identified by the IDs the collector holds, ")
	d.p("with kernel bpf stats on; beside them, in the same run and under the same load, empty programs (`bench/kcost/floor.bpf.c`) on the same tracepoints. Rounds alternate the two (%s rounds, %s of load each). ", meta.Params["rounds"], meta.Params["duration"])
	d.p("Every program runs for every socket on the host, other tenants' included, so %s idle windows before and after each load measure that background, which is subtracted (scaled to the load's length): *net* figures. *Gross* keeps it.\n\n", meta.Params["idle"])
	for _, l := range []string{"dense", "sparse"} {
		d.p("- **%s**: %s.\n", l, meta.Params[l])
	}
	d.p("\n")
	plotRows := map[string]map[string]float64{}
	totals := map[string]spread{}
	floors := map[string]spread{}
	for _, l := range []string{"dense", "sparse"} {
		tw, fl := data[[2]string{l, "tokenwire"}], data[[2]string{l, "floor"}]
		if len(tw) == 0 {
			continue
		}
		totals[l] = each(tw, kround.perChunk)
		floors[l] = each(fl, kround.perChunk)
		d.p("### %s load\n\n", l)
		d.p("Chunks delivered per round: %s; bytes per chunk: %s; other processes' CPU during the loads: %s cores.\n\n",
			each(tw, func(r kround) float64 { return r.chunks }).f(0), each(tw, func(r kround) float64 { return r.bytes / r.chunks }).f(0),
			each(append(slices.Clone(tw), fl...), func(r kround) float64 { return r.others }).f(2))
		d.p("| program | hook | runs per chunk | ns per run | ns per chunk | empty program on the hook: ns per run | target: at most 2x that + 50 ns |\n| --- | --- | --- | --- | --- | --- | --- |\n")
		var progs []string
		for p := range tw[0].ns {
			progs = append(progs, p)
		}
		slices.Sort(progs)
		plotRows[l] = map[string]float64{}
		for _, p := range progs {
			hook := tw[0].hook[p]
			flProg := floorProg(fl, hook)
			perRun := each(tw, func(r kround) float64 { return hookNsPerRun(r, p) })
			flRun := each(fl, func(r kround) float64 { return hookNsPerRun(r, flProg) })
			verdict := "no empty counterpart"
			if flProg != "" {
				verdict = atMost(byRound(tw, fl, func(x, y kround) float64 { return hookNsPerRun(x, p) - (2*hookNsPerRun(y, flProg) + 50) }), 0)
			}
			pc := each(tw, func(r kround) float64 { return r.ns[p] / r.chunks })
			plotRows[l][p] = pc.Med
			d.p("| %s | %s | %s | %s | %s | %s | %s |\n", p, hook, each(tw, func(r kround) float64 { return r.runs[p] / r.chunks }).f(2),
				perRun.f(0), pc.f(0), flRun.f(0), verdict)
			if hook == "sock_send_length" && flProg != "" && flRun.ok() {
				d.emptyWriteNs = max(d.emptyWriteNs, flRun.Max)
			}
			if hook == "sock_send_length" {
				d.target(fmt.Sprintf("write-path program (%s) at most 2x the empty program on its hook + 50 ns, %s load", p, l),
					fmt.Sprintf("%s ns/run vs empty %s ns/run", perRun.f(0), flRun.f(0)), verdict+writeFloorNote(data, l, flProg), "1")
				if l == "dense" || l == "sparse" {
					d.target(fmt.Sprintf("remote clients (only %s runs per chunk on the server), %s load: ns per chunk", p, l), pc.f(0)+" ns", "computed, no target", "1")
				}
			}
		}
		d.p("| **all programs, net** | | | | **%s** | empty programs, all hooks: **%s** ns per chunk | |\n", totals[l].f(0), floors[l].f(0))
		d.p("| all programs, gross (background included) | | | | %s | %s | |\n\n",
			each(tw, func(r kround) float64 { return r.gross / r.chunks }).f(0), each(fl, func(r kround) float64 { return r.gross / r.chunks }).f(0))
		plotRows[l]["empty programs"] = floors[l].Med
		d.target(fmt.Sprintf("all tokenwire programs at most 250 ns per delivered chunk, %s load (empty programs on the same hooks: %s ns)", l, floors[l].f(0)),
			totals[l].f(0)+" ns", atMost(totals[l], 250)+cmp.Or(floorNote(floors[l]), hooksFloorNote(data, l)), "1")
	}
	writeParts(d, data)
	baseCost(d, data, meta.Params["base"])
	slotsCost(d, data)
	detailsCost(d, data)
	for _, tl := range tlsLoads {
		tlsCost(d, data, tl, meta.Params[tl.load])
	}
	if err := trapCost(d); err != nil {
		return err
	}
	if tw, tws := data[[2]string{"dense", "tokenwire"}], data[[2]string{"sparse", "tokenwire"}]; len(tw) > 0 && len(tws) > 0 {
		ratio := byRound(tws, tw, func(x, y kround) float64 { return x.perChunk() / y.perChunk() })
		d.p("Sparse / dense, per round: %s (target at most 2).\n\n", ratio.f(2))
		d.target("sparse load at most 2x the dense one, per chunk", ratio.f(2)+"x", atMost(ratio, 2)+ratioNote(data), "1")
	}
	d.p("![BPF time per chunk by program, beside empty programs on the same hooks](bench/results/kcost.png)\n\n")
	d.p("Raw: `bench/results/kcost.csv` (per program, load, mode and round, with the idle windows' counts).\n\n")
	return plotKcost(plotRows)
}

// portNote says when the write-path target is below what reading the
// socket at all costs: the write program's first step, one load from the
// socket compared with a constant, misses the same target in every round.
func portNote(data map[[2]string][]kround, load, flProg string) string {
	const prog = "tw_pt_0_sk"
	sk, fl := data[[2]string{load, "step-sk"}], data[[2]string{load, "floor"}]
	if len(sk) == 0 || flProg == "" {
		return ""
	}
	over := byRound(sk, fl, func(x, y kround) float64 { return hookNsPerRun(x, prog) - (2*hookNsPerRun(y, flProg) + 50) })
	if !over.complete() || over.Min <= 0 {
		return ""
	}
	return fmt.Sprintf("; the target is below what reading the socket costs here: one load from the socket alone (%s, its port against a constant) took %s ns/run, over the target in every round",
		prog, each(sk, func(r kround) float64 { return hookNsPerRun(r, prog) }).f(0))
}

// writeFloorNote says when the write-path target is below what the
// write program's first steps cost here, naming the most basic step that
// was over the target in every round: reading the socket at all, finding
// its state, or finding it and recording the write in it.
func writeFloorNote(data map[[2]string][]kround, load, flProg string) string {
	if n := portNote(data, load, flProg); n != "" {
		return n
	}
	if n := stepsNote(data, load, flProg, benchutil.StateSteps); n != "" {
		return "; the target is below what the receiver's ways of finding a socket's state cost here: the port test and one of them and nothing else took, in ns/run, " + n
	}
	if n := stepsNote(data, load, flProg, benchutil.StampSteps); n != "" {
		return "; with the state in 8192 slots or in local storage (the receiver's for a connection whose front slot another holds; no step times writes in the front slots), timing a socket's writes alone, the port test, a state lookup, a clock read and two updates of the state and nothing else, took, in ns/run, " + n
	}
	return ""
}

// stepsNote lists the steps of modes (ways to do the same part of the
// write program) with their ns per run, and says that the cheapest of
// them missed the write-path target in every round; "" unless it did.
func stepsNote(data map[[2]string][]kround, load, flProg string, modes []string) string {
	fl := data[[2]string{load, "floor"}]
	cheapest, ok := cheapestSteps(data, load, modes)
	if flProg == "" || !ok {
		return ""
	}
	for _, y := range fl {
		if !(cheapest[y.round]-(2*hookNsPerRun(y, flProg)+50) > 0) {
			return ""
		}
	}
	var parts []string
	for _, mode := range modes {
		st := stepOf(mode)
		parts = append(parts, fmt.Sprintf("%s %s", st.Prog, each(data[[2]string{load, mode}], func(r kround) float64 { return hookNsPerRun(r, st.Prog) }).f(0)))
	}
	return strings.Join(parts, ", ") + "; the cheapest of them was over the target in every round"
}

// cheapestSteps is, by round of the load's floor mode, the least ns per
// run of the steps of modes (ways to do the same part of the write
// program); ok only when every mode was measured in every one of those
// rounds.
func cheapestSteps(data map[[2]string][]kround, load string, modes []string) (map[int]float64, bool) {
	fl := data[[2]string{load, "floor"}]
	if len(fl) == 0 {
		return nil, false
	}
	cheapest := map[int]float64{}
	for _, mode := range modes {
		rs := data[[2]string{load, mode}]
		if len(rs) != len(fl) {
			return nil, false
		}
		for _, y := range fl {
			i := slices.IndexFunc(rs, func(r kround) bool { return r.round == y.round })
			if i < 0 {
				return nil, false
			}
			ns := hookNsPerRun(rs[i], stepOf(mode).Prog)
			if math.IsNaN(ns) {
				return nil, false
			}
			if c, ok := cheapest[y.round]; !ok || ns < c {
				cheapest[y.round] = ns
			}
		}
	}
	return cheapest, true
}

// ratioNote gives, beside the sparse/dense target, the same ratio per run
// for the empty write program and for each of the receiver's ways to find
// a socket's state as the parts rebuild them (port test and lookup,
// nothing else), paired by round; and says when every one was over 2 by
// itself in every round.
func ratioNote(data map[[2]string][]kround) string {
	ratio := func(mode string) (spread, bool) {
		st := stepOf(mode)
		sp, de := data[[2]string{"sparse", mode}], data[[2]string{"dense", mode}]
		if len(sp) == 0 || len(de) == 0 {
			return spread{}, false
		}
		r := byRound(sp, de, func(x, y kround) float64 { return hookNsPerRun(x, st.Prog) / hookNsPerRun(y, st.Prog) })
		return r, r.ok()
	}
	fl, ok := ratio("floor")
	if !ok {
		return ""
	}
	parts := []string{fmt.Sprintf("empty program %sx", fl.f(2))}
	allOver := true
	for _, mode := range benchutil.StateSteps {
		r, ok := ratio(mode)
		if !ok {
			return ""
		}
		parts = append(parts, fmt.Sprintf("%s %sx", stepOf(mode).Prog, r.f(2)))
		allOver = allOver && r.complete() && r.Min > 2
	}
	note := "; sparse/dense per run on the write hook, paired by round: " + strings.Join(parts, ", ")
	if allOver {
		note += "; every way the receiver finds a socket's state was over 2 by itself in every round"
	}
	return note + floorsRatioNote(data)
}

// floorNote says when the target is below what empty programs cost.
func floorNote(fl spread) string {
	if fl.complete() && fl.Min >= 250 {
		return "; the target is at or below the floor: empty programs on these hooks alone cost 250 ns or more per chunk in every round"
	}
	return ""
}

// stateFloor is, by round of the load's floor mode, what the hooks
// tokenwire attaches and finding a socket's state cost together per
// chunk: the empty programs on every hook but the write hook, plus the
// cheapest way the parts found a socket's state (the port test and a
// lookup, nothing else) once per write on the write hook. A stream's
// chunks are counted per connection, so every write needs its state; ok
// only when every part was measured in every round.
func stateFloor(data map[[2]string][]kround, load string) (map[int]float64, bool) {
	fl := data[[2]string{load, "floor"}]
	flProg := floorProg(fl, "sock_send_length")
	cheapest, ok := cheapestSteps(data, load, benchutil.StateSteps)
	if flProg == "" || !ok {
		return nil, false
	}
	sums := map[int]float64{}
	for _, y := range fl {
		sums[y.round] = y.perChunk() - y.ns[flProg]/y.chunks + cheapest[y.round]*y.runs[flProg]/y.chunks
	}
	return sums, true
}

// hooksFloorNote says when the all-programs target is below the load's
// stateFloor: "" unless that floor was over 250 in every round.
func hooksFloorNote(data map[[2]string][]kround, load string) string {
	sums, ok := stateFloor(data, load)
	if !ok {
		return ""
	}
	sum := spreadOf(slices.Collect(maps.Values(sums)))
	if !sum.complete() || sum.Min <= 250 {
		return ""
	}
	return fmt.Sprintf("; the target is below what these hooks and finding a socket's state cost here: the empty programs on the other hooks, "+
		"and the cheapest of the receiver's ways to find a socket's state (the parts' port test and lookup) on each write, came to %s ns per chunk, over 250 in every round", sum.f(0))
}

// floorsRatioNote says when the sparse/dense target asks the dense load
// to cost more than it must: the sparse load's stateFloor over the dense
// one's, paired by round, was over 2 in every round, so a ratio of 2
// needs a dense cost of at least half the sparse floor, above the dense
// floor; "" unless it was.
func floorsRatioNote(data map[[2]string][]kround) string {
	sp, okS := stateFloor(data, "sparse")
	de, okD := stateFloor(data, "dense")
	if !okS || !okD {
		return ""
	}
	var ratios, halves, dense []float64
	for round, s := range sp {
		if d, ok := de[round]; ok {
			ratios = append(ratios, s/d)
			halves = append(halves, s/2)
			dense = append(dense, d)
		}
	}
	r := spreadOf(ratios)
	if len(ratios) != len(sp) || !r.complete() || r.Min <= 2 {
		return ""
	}
	return fmt.Sprintf("; the floors themselves are further apart: the empty programs on the other hooks and the cheapest of the receiver's ways to find a socket's state on each write "+
		"came to %s ns per chunk sparse against %s dense, %sx paired by round, over 2 in every round, so the target holds only while the dense load costs at least half the sparse floor (%s ns), more than the dense floor",
		spreadOf(slices.Collect(maps.Values(sp))).f(0), spreadOf(dense).f(0), r.f(2), spreadOf(halves).f(0))
}

func floorProg(fl []kround, hook string) string {
	if len(fl) == 0 || hook == "" {
		return ""
	}
	for p, h := range fl[0].hook {
		if h == hook {
			return p
		}
	}
	return ""
}

// detailsCost compares, round by round, all programs per chunk with the
// default settings against the same collector with
// streams.response_details off: what reading GenAI details from the
// response adds per chunk.
func detailsCost(d *doc, data map[[2]string][]kround) {
	d.p("GenAI response details (`streams.response_details`, on by default) against the same collector with them off, all programs, net ns per chunk, paired by round:\n\n")
	d.p("| load | with details | without | added per chunk | target: at most 100 ns |\n| --- | --- | --- | --- | --- |\n")
	for _, l := range []string{"dense", "sparse"} {
		tw, nd := data[[2]string{l, "tokenwire"}], data[[2]string{l, "nodetails"}]
		if len(tw) == 0 || len(nd) == 0 {
			continue
		}
		added := byRound(tw, nd, func(x, y kround) float64 { return x.perChunk() - y.perChunk() })
		v := atMost(added, 100)
		d.p("| %s | %s | %s | %s | %s |\n", l, each(tw, kround.perChunk).f(0), each(nd, kround.perChunk).f(0), added.f(0), v)
		d.target(fmt.Sprintf("GenAI response details add at most 100 ns per chunk, %s load", l), added.f(0)+" ns", v, "1")
	}
	d.p("\n")
}

// baseCost compares, round by round, this run's collector against the
// build of another commit (kcost's mode base, its label base) with the
// same config: what the programs' changes between the two save or cost,
// measured within one run.
func baseCost(d *doc, data map[[2]string][]kround, base string) {
	if len(data[[2]string{"dense", "base"}]) == 0 && len(data[[2]string{"sparse", "base"}]) == 0 {
		return
	}
	commit, _, _ := strings.Cut(base, ",")
	d.p("This run's collector against the collector built from commit %s (kcost's mode base; `bench/run.sh` builds it from `BENCH_BASE`, by default the commit in the run ID of the results committed before the run), with the same config, next to this run's in every round, paired by round: tokenwire's write program in net ns per run, and all programs in net ns per chunk. What differs between the two builds' programs shows here, within one run; between two runs, what this host's speed drifts by can be larger. *Saved* is %s's less this run's.\n\n", base, commit)
	d.p("| load | write program: this run's | %s's | saved per run | all programs: this run's | %s's | saved per chunk |\n| --- | --- | --- | --- | --- | --- | --- |\n", commit, commit)
	pairedRows(d, data, "base", eachWay)
}

// pairedRows writes, per load, the rows of a table that pairs mode other
// with mode tokenwire by round: the write program's net ns per run in
// each and other's less tokenwire's, then the same for all programs per
// chunk; verdict says how the differences went over the rounds.
func pairedRows(d *doc, data map[[2]string][]kround, other string, verdict func(spread) string) {
	for _, l := range []string{"dense", "sparse"} {
		ot, tw, saved, ok := writeRunPaired(data, l, other, "tokenwire")
		if !ok {
			continue
		}
		otr, twr := data[[2]string{l, other}], data[[2]string{l, "tokenwire"}]
		savedChunk := byRound(otr, twr, func(x, y kround) float64 { return x.perChunk() - y.perChunk() })
		d.p("| %s | %s | %s | %s (%s) | %s | %s | %s (%s) |\n", l, tw.f(0), ot.f(0), saved.f(0), verdict(saved),
			each(twr, kround.perChunk).f(0), each(otr, kround.perChunk).f(0), savedChunk.f(0), verdict(savedChunk))
	}
	d.p("\n")
}

// eachWay says whether a saving that can go either way held in every
// round, or its opposite did.
func eachWay(saved spread) string {
	switch {
	case !saved.complete():
		return "not measured in every round"
	case saved.Min > 0:
		return "cheaper in every round"
	case saved.Max < 0:
		return "dearer in every round"
	}
	return "either way"
}

// slotsCost compares, round by round, the collector as configured (its
// connections' state in slots where the kernel allows) against the same
// collector with streams.state_slots 0 (socket storage alone): what the
// slots save the real write program per run, and all programs per chunk.
func slotsCost(d *doc, data map[[2]string][]kround) {
	if len(data[[2]string{"dense", "noslots"}]) == 0 && len(data[[2]string{"sparse", "noslots"}]) == 0 {
		return
	}
	d.p("The state slots (64 in front, kmalloc'ed, then `streams.state_slots`, 8192 by default, vmalloc'ed) against the same collector with `state_slots: 0`, every connection's state in socket storage, paired by round: tokenwire's write program in net ns per run, and all programs in net ns per chunk.\n\n")
	d.p("| load | write program: slots | socket storage | saved per run | all programs: slots | socket storage | saved per chunk |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	pairedRows(d, data, "noslots", everyRound)
}

// writeRunPaired returns tokenwire's write program in net ns per run on
// load l in modes a and b, and a's less b's paired by round; ok is false
// when either mode has no rounds or tokenwire's rounds no write program.
func writeRunPaired(data map[[2]string][]kround, l, a, b string) (ra, rb, diff spread, ok bool) {
	as, bs := data[[2]string{l, a}], data[[2]string{l, b}]
	p := writeProg(data[[2]string{l, "tokenwire"}])
	if len(as) == 0 || len(bs) == 0 || p == "" {
		return spread{}, spread{}, spread{}, false
	}
	run := func(r kround) float64 { return hookNsPerRun(r, p) }
	return each(as, run), each(bs, run), byRound(as, bs, func(x, y kround) float64 { return run(x) - run(y) }), true
}

// everyRound says whether a saving held in every round.
func everyRound(saved spread) string {
	if saved.complete() && saved.Min > 0 {
		return "in every round"
	}
	return "not in every round"
}

// writeParts takes the write program apart: each step of
// bench/kcost/parts.bpf.c ran alone on sock_send_length in its own mode,
// in every round; tokenwire's write program comes from the tokenwire
// rounds. Differences pair the modes by round.
func writeParts(d *doc, data map[[2]string][]kround) {
	if len(data[[2]string{"dense", "step-tail"}]) == 0 {
		return
	}
	d.p("Where the write program's time goes: `bench/kcost/parts.bpf.c` rebuilds it step by step, each step one program that also does the steps above it; each ran alone on `sock_send_length`, in every round, under the same loads (net ns per run). *Added* is the step's own cost: the difference from the step above (or from the step it names, for the alternatives to the slot, to bpf_task_pt_regs and to the user read), paired by round. The last row is tokenwire's write program itself against the last step: what classifying the write's bytes and accounting the chunk add; the steps from `tw_pt_0c_clock` on find the state in 8192 slots (`tw_pt_0b_slot`'s lookup), where the receiver finds most connections' in its 64 front slots (`tw_pt_0b_small`'s), so that row also holds the difference between those two lookups.\n\n")
	d.p("| step | adds | dense: ns per run | dense: added | sparse: ns per run | sparse: added |\n| --- | --- | --- | --- | --- | --- |\n")
	perRun := func(l, mode, prog string) ([]kround, spread) {
		rs := data[[2]string{l, mode}]
		return rs, each(rs, func(r kround) float64 { return hookNsPerRun(r, prog) })
	}
	added := func(a []kround, pa string, b []kround, pb string) string {
		return byRound(a, b, func(x, y kround) float64 { return hookNsPerRun(x, pa) - hookNsPerRun(y, pb) }).f(0)
	}
	cells := map[string][]string{}
	for _, l := range []string{"dense", "sparse"} {
		for i, st := range benchutil.WriteSteps {
			rs, per := perRun(l, st.Mode, st.Prog)
			add := ""
			if i > 0 {
				prev := benchutil.WriteSteps[i-1]
				if st.Base != "" {
					prev = stepOf(st.Base)
				}
				prs, _ := perRun(l, prev.Mode, prev.Prog)
				add = added(rs, st.Prog, prs, prev.Prog)
			}
			cells[st.Mode] = append(cells[st.Mode], per.f(0), add)
		}
		tw := data[[2]string{l, "tokenwire"}]
		last := benchutil.WriteSteps[len(benchutil.WriteSteps)-1]
		lrs, _ := perRun(l, last.Mode, last.Prog)
		if p := writeProg(tw); p != "" {
			_, per := perRun(l, "tokenwire", p)
			cells["tokenwire"] = append(cells["tokenwire"], per.f(0), added(tw, p, lrs, last.Prog))
		} else {
			cells["tokenwire"] = append(cells["tokenwire"], "n/a", "n/a")
		}
	}
	for _, st := range benchutil.WriteSteps {
		c := cells[st.Mode]
		d.p("| %s | %s | %s | %s | %s | %s |\n", st.Prog, st.Adds, c[0], c[1], c[2], c[3])
	}
	c := cells["tokenwire"]
	d.p("| tokenwire's write program | classifying the write's bytes (stream_peek.h), accounting the chunk (stream_write.h) | %s | %s | %s | %s |\n\n", c[0], c[1], c[2], c[3])
	stepSavings(d, perRun)
	tailsNote(d, data)
}

// tailsNote says how many of the body writes in mode tokenwire the
// collector's programs read from the server's memory rather than the
// kernel's copy (its write_tails_from_user over each load), against the
// chunks the clients received.
func tailsNote(d *doc, data map[[2]string][]kround) {
	var parts []string
	for _, l := range []string{"dense", "sparse"} {
		rs := data[[2]string{l, "tokenwire"}]
		if len(rs) == 0 || math.IsNaN(rs[0].tailsFromUser) {
			return
		}
		tails := each(rs, func(r kround) float64 { return r.tailsFromUser })
		chunks := each(rs, func(r kround) float64 { return r.chunks })
		parts = append(parts, fmt.Sprintf("%s %s of %s chunks", l, tails.f(0), chunks.f(0)))
	}
	d.p("Body writes whose last bytes tokenwire's programs read from the server's memory, where they read the kernel's copy (the collector's `otelcol_receiver_tokenwire_write_tails_from_user` over each load of mode tokenwire, per round): %s.\n\n", strings.Join(parts, "; "))
}

// stepSavings says what the receiver's ways save against the others,
// paired by round: the connection's slot against local storage, reading
// the syscall's registers at the top of the task's stack against asking
// bpf_task_pt_regs, and reading a write's last bytes from the kernel's
// copy against finding its buffers and reading them from user memory.
func stepSavings(d *doc, perRun func(l, mode, prog string) ([]kround, spread)) {
	stepSaving(d, perRun, "step-store-state", "step-state",
		"A write's time and count recorded in the connection's slot, against the socket's local storage")
	stepSaving(d, perRun, "step-args-helper", "step-args",
		"The syscall's registers read at the top of the task's stack, against asking bpf_task_pt_regs for them")
	stepSaving(d, perRun, "step-tail", "step-tail-copy",
		"A write's last 16 bytes read from the kernel's copy of them, against finding the syscall's buffers and reading them from user memory")
}

// stepSaving says what step to saves against step from, on both loads,
// paired by round.
func stepSaving(d *doc, perRun func(l, mode, prog string) ([]kround, spread), from, to, what string) {
	a, b := stepOf(from), stepOf(to)
	var parts []string
	for _, l := range []string{"dense", "sparse"} {
		as, _ := perRun(l, a.Mode, a.Prog)
		bs, _ := perRun(l, b.Mode, b.Prog)
		if len(as) == 0 || len(bs) == 0 {
			return
		}
		saved := byRound(as, bs, func(x, y kround) float64 { return hookNsPerRun(x, a.Prog) - hookNsPerRun(y, b.Prog) })
		parts = append(parts, fmt.Sprintf("%s %s ns per run (%s)", l, saved.f(0), everyRound(saved)))
	}
	d.p("%s saved (paired by round): %s.\n\n", what, strings.Join(parts, "; "))
}

// stepOf is the write step of mode.
func stepOf(mode string) benchutil.WriteStep {
	for _, st := range benchutil.WriteSteps {
		if st.Mode == mode {
			return st
		}
	}
	panic("no write step " + mode)
}

// writeProg is the tokenwire program on sock_send_length.
func writeProg(rs []kround) string {
	if len(rs) == 0 {
		return ""
	}
	for p, h := range rs[0].hook {
		if h == "sock_send_length" {
			return p
		}
	}
	return ""
}
