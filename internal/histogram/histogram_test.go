package histogram

import (
	"slices"
	"testing"
)

func TestObserveUsesUpperInclusiveBounds(t *testing.T) {
	bounds := []float64{1, 2, 5}
	h := New(len(bounds))
	for _, v := range []float64{0.5, 1, 1.5, 2, 5, 7} {
		h.Observe(bounds, v)
	}
	if want := []uint64{2, 2, 1, 1}; !slices.Equal(h.Counts, want) {
		t.Fatalf("counts %v, want %v", h.Counts, want)
	}
	if h.Count != 6 || h.Sum != 17 || !h.HasMinMax || h.Min != 0.5 || h.Max != 7 {
		t.Fatalf("count %d sum %v min %v max %v (known %v)", h.Count, h.Sum, h.Min, h.Max, h.HasMinMax)
	}
}

func TestAddCountsForgetsMinMax(t *testing.T) {
	bounds := []float64{1, 2}
	h := New(len(bounds))
	h.Observe(bounds, 1.5)
	h.AddCounts([]uint32{3, 0, 1, 9}, 10) // the extra count has no bucket
	if want := []uint64{3, 1, 1}; !slices.Equal(h.Counts, want) || h.Count != 5 || h.Sum != 11.5 {
		t.Fatalf("counts %v count %d sum %v", h.Counts, h.Count, h.Sum)
	}
	if h.HasMinMax {
		t.Fatal("min and max still claimed after bucket counts were added")
	}
	h.AddCounts([]uint32{0, 0, 0}, 0)
	if h.HasMinMax || h.Count != 5 {
		t.Fatal("an empty addition changed the histogram")
	}
}
