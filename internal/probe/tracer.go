package probe

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// ErrClosed is returned by Tracer.Next once the tracer is closed, or once
// it is stopped and the ring buffer is drained.
var ErrClosed = errors.New("tracer closed")

// Tracer is what every probe's tracer shares: its loaded maps, the hook
// points it attached (detached once, last first), and the reader of its
// ring buffer. A capability's tracer embeds it and decodes the records.
type Tracer struct {
	maps     io.Closer
	attached []io.Closer
	reader   *ringbuf.Reader
	record   ringbuf.Record

	detachOnce sync.Once
	detachErr  error
	closeOnce  sync.Once
	closeErr   error
}

// LoadMaps loads the maps of spec into maps (a bpf2go Maps struct) and
// hands them to the tracer, which closes them last in Close; what names
// the capability in the error.
func (t *Tracer) LoadMaps(spec *ebpf.CollectionSpec, maps io.Closer, what string) error {
	if err := spec.LoadAndAssign(maps, nil); err != nil {
		return fmt.Errorf("loading %s maps: %w", what, err)
	}
	t.maps = maps
	return nil
}

// Attached records something attached, detached by Stop and Close.
func (t *Tracer) Attached(c io.Closer) {
	if c != nil {
		t.attached = append(t.attached, c)
	}
}

// Release detaches what is attached and closes the maps, for an attempt
// to attach that failed and is tried again another way.
func (t *Tracer) Release() {
	t.detachAll()
	t.attached = nil
	if t.maps != nil {
		t.maps.Close()
		t.maps = nil
	}
}

// OpenRing starts reading the ring buffer m.
func (t *Tracer) OpenRing(m *ebpf.Map) (err error) {
	t.reader, err = ringbuf.NewReader(m)
	return err
}

// Next blocks until the next record and returns its bytes, valid until
// the next call. It returns ErrClosed after Close, and after Stop once the
// records already written are read. Not safe for concurrent use.
func (t *Tracer) Next() ([]byte, error) {
	if err := ReadRing(t.reader, &t.record); err != nil {
		if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, ringbuf.ErrFlushed) {
			return nil, ErrClosed
		}
		return nil, err
	}
	return t.record.RawSample, nil
}

func (t *Tracer) detachAll() error {
	var errs []error
	for i := len(t.attached) - 1; i >= 0; i-- {
		errs = append(errs, t.attached[i].Close())
	}
	return errors.Join(errs...)
}

func (t *Tracer) detach() error {
	t.detachOnce.Do(func() { t.detachErr = t.detachAll() })
	return t.detachErr
}

// Stop detaches every hook point, so the kernel writes no more records,
// and lets Next return the records already in the ring buffer before it
// returns ErrClosed: what happened while the collector ran is reported
// when it shuts down. Close is still needed to free the maps.
func (t *Tracer) Stop() error {
	err := t.detach()
	if t.reader != nil {
		err = errors.Join(err, t.reader.Flush())
	}
	return err
}

// Close detaches every hook point, stops a blocked Next and frees the
// maps. It may be called more than once and concurrently with Next.
func (t *Tracer) Close() error {
	t.closeOnce.Do(func() {
		errs := []error{t.detach()}
		if t.reader != nil {
			errs = append(errs, t.reader.Close())
		}
		if t.maps != nil {
			errs = append(errs, t.maps.Close())
		}
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}
