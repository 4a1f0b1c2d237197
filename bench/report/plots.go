package main

import (
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// plotLatency draws the tail of each variant's chunk latency (1 - CDF,
// log-log) from the histograms of all its repeats.
func plotLatency(ht *benchutil.Table, stack string) error {
	type pt struct{ le, c float64 }
	hist := map[string][]pt{}
	for _, r := range ht.Rows {
		if !strings.HasPrefix(r["variant"], stack+"/") || isTwin(r["variant"]) {
			continue // twins ran at twice the load
		}
		le := math.Inf(1)
		if r["le_us"] != "+Inf" {
			le = num(r, "le_us")
		}
		hist[r["variant"]] = append(hist[r["variant"]], pt{le, num(r, "count")})
	}
	if len(hist) == 0 {
		return errNoData
	}
	p := plot.New()
	p.Title.Text = "chunk delivery latency, " + stack + " server (all repeats)"
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "share of chunks slower (1 - CDF)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	var names []string
	for v := range hist {
		names = append(names, v)
	}
	slices.Sort(names)
	for i, v := range names {
		h := hist[v]
		merged := map[float64]float64{}
		var total float64
		for _, x := range h {
			merged[x.le] += x.c
			total += x.c
		}
		var les []float64
		for le := range merged {
			les = append(les, le)
		}
		slices.Sort(les)
		var xy plotter.XYs
		cum := 0.0
		for _, le := range les {
			cum += merged[le]
			tail := 1 - cum/total
			if math.IsInf(le, 1) || tail <= 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: le / 1e3, Y: tail})
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(v, l)
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(*resultsDir, "latency-"+stack+".png"))
}

// plotKcost draws, per load, the tokenwire programs' ns per chunk stacked,
// beside the empty programs' total.
func plotKcost(rows map[string]map[string]float64) error {
	p := plot.New()
	p.Title.Text = "BPF time per delivered chunk (median over rounds, net of background)"
	p.Y.Label.Text = "ns per chunk"
	loads := []string{"dense", "sparse"}
	var progs []string
	for _, l := range loads {
		for prog := range rows[l] {
			if prog != "empty programs" && !slices.Contains(progs, prog) {
				progs = append(progs, prog)
			}
		}
	}
	slices.Sort(progs)
	w := vg.Points(28)
	var below *plotter.BarChart
	for i, prog := range progs {
		vals := make(plotter.Values, len(loads))
		for j, l := range loads {
			vals[j] = rows[l][prog]
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = -w / 2
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(prog, b)
	}
	fl := make(plotter.Values, len(loads))
	for j, l := range loads {
		fl[j] = rows[l]["empty programs"]
	}
	fb, err := plotter.NewBarChart(fl, w)
	if err != nil {
		return err
	}
	fb.Color = color.Gray{Y: 160}
	fb.LineStyle.Width = 0
	fb.Offset = w / 2
	p.Add(fb)
	p.Legend.Add("empty programs, same hooks (floor)", fb)
	target := plotter.NewFunction(func(float64) float64 { return 250 })
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(target)
	p.Legend.Add("target 250 ns", target)
	p.NominalX(loads...)
	p.Legend.Top = true
	p.Legend.Left = true
	return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(*resultsDir, "kcost.png"))
}

// plotXDP draws ns/packet against blocklist size per filter and case.
func plotXDP(series map[string][][3]float64, floor float64) error {
	p := plot.New()
	p.Title.Text = "XDP program time per packet (BPF_PROG_TEST_RUN, median)"
	p.X.Label.Text = "blocklist entries"
	p.Y.Label.Text = "ns per packet"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var names []string
	for k := range series {
		names = append(names, k)
	}
	slices.Sort(names)
	for i, k := range names {
		var xy plotter.XYs
		for _, v := range series[k] {
			xy = append(xy, plotter.XY{X: v[0], Y: v[1]})
		}
		slices.SortFunc(xy, func(a, b plotter.XY) int { return int(a.X - b.X) })
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		if strings.HasPrefix(k, "lpm") {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(k, l, pts)
	}
	if !math.IsNaN(floor) {
		f := plotter.NewFunction(func(float64) float64 { return floor })
		f.Color = color.Gray{Y: 120}
		p.Add(f)
		p.Legend.Add("empty program "+strconv.FormatFloat(floor, 'f', 1, 64)+" ns", f)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(*resultsDir, "xdp.png"))
}
