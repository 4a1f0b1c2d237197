// Package histogram accumulates explicit-bucket histograms as plain Go
// values, for the aggregators to fill and the receiver to translate into
// OTLP histogram points.
package histogram

// Histogram holds cumulative observations over fixed bucket bounds. The
// bounds live with the caller (one slice shared by every series of a
// metric); Counts has one more entry than they have.
type Histogram struct {
	Counts []uint64
	Count  uint64
	Sum    float64
	// Min and Max are valid when HasMinMax: observations that arrive as
	// bucket counts (from the kernel) leave them unknown.
	Min, Max  float64
	HasMinMax bool
}

// New returns an empty histogram for bounds of length nBounds.
func New(nBounds int) *Histogram {
	return &Histogram{Counts: make([]uint64, nBounds+1)}
}

// Observe adds one value: it goes into the first bucket whose upper bound
// is at least v, as OTLP's explicit buckets define them.
func (h *Histogram) Observe(bounds []float64, v float64) {
	i := 0
	for i < len(bounds) && v > bounds[i] {
		i++
	}
	h.Counts[i]++
	if !h.HasMinMax || v < h.Min {
		h.Min = v
	}
	if !h.HasMinMax || v > h.Max {
		h.Max = v
	}
	h.HasMinMax = h.Count == 0 || h.HasMinMax
	h.Count++
	h.Sum += v
}

// AddCounts folds in per-bucket counts and their sum, as the kernel
// reports chunk intervals. Min and max become unknown.
func (h *Histogram) AddCounts(counts []uint32, sum float64) {
	var n uint64
	for i, c := range counts {
		if i < len(h.Counts) {
			h.Counts[i] += uint64(c)
			n += uint64(c)
		}
	}
	if n > 0 {
		h.HasMinMax = false
	}
	h.Count += n
	h.Sum += sum
}

// Clone returns a copy that shares nothing with h.
func (h *Histogram) Clone() *Histogram {
	c := *h
	c.Counts = append([]uint64(nil), h.Counts...)
	return &c
}
