package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/tokenwire/tokenwire/bench/benchutil"
)

// spread is a quantity over repeats: median and range over the N of Of
// repeats that had it.
type spread struct {
	Med, Min, Max float64
	N, Of         int
}

// spreadOf is v's median and range. A NaN is a repeat without the
// quantity (a ratio with nothing under it, such as a program that did not
// run in that round, or a missing cell): it is left out of the figures,
// which then say in how many repeats they were measured, and no verdict
// is drawn from them.
func spreadOf(v []float64) spread {
	c := slices.DeleteFunc(slices.Clone(v), math.IsNaN)
	if len(c) == 0 {
		return spread{Med: math.NaN(), Min: math.NaN(), Max: math.NaN(), Of: len(v)}
	}
	return spread{Med: benchutil.Median(c), Min: slices.Min(c), Max: slices.Max(c), N: len(c), Of: len(v)}
}

func (s spread) ok() bool { return s.N > 0 && !math.IsNaN(s.Med) }

// complete says the quantity was measured in every repeat.
func (s spread) complete() bool { return s.ok() && s.N == s.Of }

// partial is what f and pct add when some repeats lacked the quantity.
func (s spread) partial() string {
	if s.N < s.Of {
		return fmt.Sprintf(" (measured in %d of %d)", s.N, s.Of)
	}
	return ""
}

// f formats "median [min-max]" with prec decimals ("n/a" without data).
func (s spread) f(prec int) string {
	if !s.ok() {
		return "n/a"
	}
	m := strconv.FormatFloat(s.Med, 'f', prec, 64)
	if s.N == 1 {
		return m + " (n=1)" + s.partial()
	}
	return fmt.Sprintf("%s [%s-%s]%s", m, strconv.FormatFloat(s.Min, 'f', prec, 64), strconv.FormatFloat(s.Max, 'f', prec, 64), s.partial())
}

// pct formats a fraction as a signed percentage spread.
func (s spread) pct() string {
	if !s.ok() {
		return "n/a"
	}
	if s.N == 1 {
		return fmt.Sprintf("%+.1f%% (n=1)%s", s.Med*100, s.partial())
	}
	return fmt.Sprintf("%+.1f%% [%+.1f%% to %+.1f%%]%s", s.Med*100, s.Min*100, s.Max*100, s.partial())
}

// atMost is the verdict on "x <= limit" with x's spread: met only if the
// whole range meets it, missed if none of it does, otherwise within noise.
func atMost(x spread, limit float64) string {
	switch {
	case !x.ok():
		return "not measured"
	case !x.complete():
		return fmt.Sprintf("not shown: measured in %d of %d repeats", x.N, x.Of)
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
	case !x.complete() || !ref.complete():
		return "not shown: not measured in every repeat"
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
