package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// spread is a quantity over repeats: median and range.
type spread struct {
	Med, Min, Max float64
	N             int
}

// spreadOf is v's median and range. A NaN is a repeat without the
// quantity (a ratio of two zeros: a program that did not run in that
// round) and is left out, so N counts the repeats that had it.
func spreadOf(v []float64) spread {
	c := slices.DeleteFunc(slices.Clone(v), math.IsNaN)
	if len(c) == 0 {
		return spread{Med: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	return spread{Med: benchutil.Median(c), Min: slices.Min(c), Max: slices.Max(c), N: len(c)}
}

func (s spread) ok() bool { return s.N > 0 && !math.IsNaN(s.Med) }

// f formats "median [min-max]" with prec decimals ("n/a" without data).
func (s spread) f(prec int) string {
	if !s.ok() {
		return "n/a"
	}
	m := strconv.FormatFloat(s.Med, 'f', prec, 64)
	if s.N == 1 {
		return m + " (n=1)"
	}
	return fmt.Sprintf("%s [%s-%s]", m, strconv.FormatFloat(s.Min, 'f', prec, 64), strconv.FormatFloat(s.Max, 'f', prec, 64))
}

// pct formats a fraction as a signed percentage spread.
func (s spread) pct() string {
	if !s.ok() {
		return "n/a"
	}
	if s.N == 1 {
		return fmt.Sprintf("%+.1f%% (n=1)", s.Med*100)
	}
	return fmt.Sprintf("%+.1f%% [%+.1f%% to %+.1f%%]", s.Med*100, s.Min*100, s.Max*100)
}

// atMost is the verdict on "x <= limit" with x's spread: met only if the
// whole range meets it, missed if none of it does, otherwise within noise.
func atMost(x spread, limit float64) string {
	switch {
	case !x.ok():
		return "not measured"
	case x.Max <= limit:
		return "**met**"
	case x.Min > limit:
		return "**missed**"
	}
	return "within noise (the range straddles the limit)"
}

// within is the verdict on "x within ref's range (at most its maximum)":
// met if every repeat of x is at most ref's maximum, missed if every
// repeat is above it, otherwise within noise.
func within(x, ref spread) string {
	switch {
	case !x.ok() || !ref.ok():
		return "not measured"
	case x.Max <= ref.Max:
		return "**met**"
	case x.Min > ref.Max:
		return "**missed**"
	}
	return "within noise (the ranges overlap)"
}

func num(row map[string]string, k string) float64 {
	v, err := strconv.ParseFloat(row[k], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}
