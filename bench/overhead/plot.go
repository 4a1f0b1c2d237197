package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

var palette = []color.RGBA{
	{31, 119, 180, 255}, // blue
	{214, 39, 40, 255},  // red
	{44, 160, 44, 255},  // green
	{255, 127, 14, 255}, // orange
	{148, 103, 189, 255},
}

// plotCDF draws the chunk delivery latency distribution of each variant
// as a CDF on a log time axis (10 us .. 1 s), plus a second panel with
// the tail (1 - CDF, log scale) so p99 and p99.9 differences are visible.
func plotCDF(path string, variants []string, hists map[string][]uint64, bounds []float64) error {
	const W, H = 1000, 820
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	const left, right = 80, 220
	xlo, xhi := 1.0, 6.0 // log10 us: 10 us .. 1 s
	xOf := func(us float64) int {
		l := (math.Log10(us) - xlo) / (xhi - xlo)
		return left + int(l*float64(W-left-right))
	}
	panels := []struct {
		top, bottom int
		title       string
		yOf         func(cdf float64) (float64, bool) // 0..1 from bottom
		ticks       []float64
		tickLabel   func(float64) string
	}{
		{40, 380, "chunk delivery latency: CDF", func(c float64) (float64, bool) { return c, true },
			[]float64{0, 0.25, 0.5, 0.75, 1}, func(v float64) string { return fmt.Sprintf("%.2f", v) }},
		{450, 780, "tail: 1 - CDF (log)", func(c float64) (float64, bool) {
			t := 1 - c
			if t <= 1e-5 {
				return 0, false
			}
			return (math.Log10(t) + 5) / 5, true // 1e-5 .. 1
		}, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, func(v float64) string { return fmt.Sprintf("1e%d", int(math.Round(v*5-5))) }},
	}
	black := color.RGBA{0, 0, 0, 255}
	grey := color.RGBA{220, 220, 220, 255}
	for _, p := range panels {
		yPix := func(y float64) int { return p.bottom - int(y*float64(p.bottom-p.top)) }
		// grid and axes
		for e := xlo; e <= xhi+1e-9; e++ {
			x := xOf(math.Pow(10, e))
			vline(img, x, p.top, p.bottom, grey)
			label(img, x-14, p.bottom+16, usLabel(math.Pow(10, e)), black)
		}
		for _, t := range p.ticks {
			y := yPix(t)
			hline(img, left, W-right, y, grey)
			label(img, left-50, y+4, p.tickLabel(t), black)
		}
		hline(img, left, W-right, p.bottom, black)
		vline(img, left, p.top, p.bottom, black)
		label(img, left, p.top-10, p.title, black)
		label(img, (W-right)/2, p.bottom+34, "latency (log)", black)
		for vi, v := range variants {
			h := hists[v]
			var total uint64
			for _, c := range h {
				total += c
			}
			if total == 0 {
				continue
			}
			col := palette[vi%len(palette)]
			var cum uint64
			px, py, have := 0, 0, false
			for i, c := range h {
				if i >= len(bounds) {
					break
				}
				cum += c
				us := bounds[i]
				if us < math.Pow(10, xlo) || us > math.Pow(10, xhi) {
					continue
				}
				y, ok := p.yOf(float64(cum) / float64(total))
				if !ok {
					have = false
					continue
				}
				x, yy := xOf(us), yPix(y)
				if have {
					line(img, px, py, x, yy, col)
					line(img, px, py+1, x, yy+1, col)
				}
				px, py, have = x, yy, true
			}
		}
	}
	for vi, v := range variants {
		col := palette[vi%len(palette)]
		y := 60 + vi*22
		for d := 0; d < 3; d++ {
			hline(img, W-right+20, W-right+50, y+d-1, col)
		}
		label(img, W-right+58, y+4, v, black)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, img)
}

func usLabel(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.0fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.0fms", us/1e3)
	default:
		return fmt.Sprintf("%.0fus", us)
	}
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

// line draws a segment (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
