package xdp

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// tableSlot is one of the program's one-slot arrays of maps
// (tw_xdp_block4, tw_xdp_block6, tw_xdp_allow4, tw_xdp_allow6) and the
// prefix table in force in it.
type tableSlot struct {
	name    string        // kernel name of its tables
	v6      bool          // IPv6 tables
	buckets uint32        // buckets per table
	spec    *ebpf.MapSpec // the tables' template, sized at load
	outer   *ebpf.Map
	inner   *ebpf.Map // in force (our fd); nil before the first swap
}

// newSlot sizes the template of the outer map named outer in spec for
// capacity prefixes. The program's lookups are inlined for that size, so
// every table of the slot must have it (tables are not BPF_F_INNER_MAP).
func newSlot(spec *ebpf.CollectionSpec, outer, name string, v6 bool, capacity uint32) *tableSlot {
	inner := spec.Maps[outer].InnerMap
	inner.MaxEntries = tableEntries(capacity, v6)
	t := inner.Copy()
	t.Name = name
	return &tableSlot{name: name, v6: v6, buckets: tableBuckets(capacity), spec: t}
}

// build creates a table holding prefixes (distinct, masked, of the slot's
// family), expanded over fewer lengths where it has room (expand), off to
// the side: nothing reads it until swap.
func (s *tableSlot) build(prefixes []netip.Prefix) (*ebpf.Map, error) {
	buckets := s.buckets
	prefixes = expand(prefixes, expansionBudget(buckets))
	m, err := ebpf.NewMap(s.spec)
	if err != nil {
		return nil, fmt.Errorf("creating table %s: %w", s.name, err)
	}
	if s.v6 {
		err = fillTable(m, build6, prefixes, buckets)
	} else {
		err = fillTable(m, build4, prefixes, buckets)
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("filling table %s: %w", s.name, err)
	}
	return m, nil
}

// fillTable writes into m the image that build makes of prefixes in buckets
// buckets.
func fillTable[V any](m *ebpf.Map, build func([]netip.Prefix, uint32) (tableImage[V], error), prefixes []netip.Prefix, buckets uint32) error {
	img, err := build(prefixes, buckets)
	if err != nil {
		return err
	}
	return writeImage(m, img)
}

// swap makes m the table in force. The update returns after every
// program that could still see the previous table has finished (the
// kernel's synchronize_rcu for map-in-map updates). The previous table
// is returned, still open, so that a failed multi-table reload can put it
// back; the caller closes it.
func (s *tableSlot) swap(m *ebpf.Map) (prev *ebpf.Map, err error) {
	if err := s.outer.Put(uint32(0), m); err != nil {
		return nil, fmt.Errorf("installing table %s: %w", s.name, err)
	}
	prev, s.inner = s.inner, m
	return prev, nil
}

// close releases the slot's maps (the kernel frees a table once neither
// we nor the outer map hold it).
func (s *tableSlot) close() error {
	var errs []error
	for _, m := range []*ebpf.Map{s.outer, s.inner} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// writeImage writes a built table: one batch update where the kernel
// supports batches on arrays, one syscall per element where it does not.
func writeImage[V any](m *ebpf.Map, img tableImage[V]) error {
	n, err := m.BatchUpdate(img.index, img.value, nil)
	if err == nil {
		if n != len(img.index) {
			return fmt.Errorf("batch update stored %d of %d elements", n, len(img.index))
		}
		return nil
	}
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range img.index {
		if err := m.Put(img.index[i], &img.value[i]); err != nil {
			return err
		}
	}
	return nil
}
