package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
)

func float32s(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// A collective on a framework's stream runs after the kernel queued before
// it and before the kernel queued after it, with no host wait on the
// stream: the producer, the collective and the consumer are queued back to
// back, and every piece of the collective's device work falls between the
// two kernels on the device's timeline.
func TestStreamOrderedAllReduce(t *testing.T) {
	const (
		lat   = 5 * time.Millisecond
		count = 3<<18 + 1 // a few chunks
	)
	devs := []*hostsim.Device{
		hostsim.New(hostsim.Latency{Copy: lat, Kernel: lat, Launch: 4 * lat}),
		hostsim.New(hostsim.Latency{Copy: lat, Kernel: lat, Launch: 4 * lat}),
	}
	for _, d := range devs {
		defer d.Close()
	}
	got := make([][]float32, 2)
	runRanks(t, 2, algo.Ring, func(ctx context.Context, c *goccl.Comm) error {
		d := devs[c.Rank()]
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		fs := s.(*hostsim.Stream)
		buf, err := d.Alloc(reduceop.Float32, count)
		if err != nil {
			return err
		}
		defer buf.Free()
		b := float32s(buf.(*hostsim.Buffer).Bytes())
		d.StartTimeline()
		v := float32(c.Rank() + 1)
		if err := fs.Launch("producer", func() {
			for i := range b {
				b[i] = v
			}
		}); err != nil {
			return err
		}
		w := c.OnStream(fs).AllReduce(ctx, buf, reduceop.Sum)
		var seen []float32
		if err := fs.Launch("consumer", func() { seen = append([]float32(nil), b...) }); err != nil {
			return err
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
		if err := fs.Synchronize(ctx); err != nil {
			return err
		}
		got[c.Rank()] = seen
		return nil
	})
	for r, d := range devs {
		for i, x := range got[r] {
			if x != 3 {
				t.Fatalf("rank %d: consumer saw %v at %d, want 3 (1+2)", r, x, i)
			}
		}
		var prodEnd, consStart time.Time
		for _, s := range d.Timeline() {
			if s.Kind == hostsim.KindLaunch && s.Name == "producer" {
				prodEnd = s.End
			}
			if s.Kind == hostsim.KindLaunch && s.Name == "consumer" {
				consStart = s.Start
			}
		}
		work := 0
		for _, s := range d.Timeline() {
			switch s.Kind {
			case hostsim.KindCopyToHost, hostsim.KindCopyFromHost, hostsim.KindCopy, hostsim.KindReduce:
				work++
				if s.Start.Before(prodEnd) {
					t.Errorf("rank %d: %v started %v before the producer ended", r, s.Kind, prodEnd.Sub(s.Start))
				}
				if s.End.After(consStart) {
					t.Errorf("rank %d: %v ended %v after the consumer started", r, s.Kind, s.End.Sub(consStart))
				}
			}
		}
		if work == 0 {
			t.Errorf("rank %d: no device work between producer and consumer", r)
		}
	}
}

// A collective on a stream that fails still releases the stream, and its
// Work says why.
func TestStreamOrderedFailureReleasesStream(t *testing.T) {
	d := hostsim.New()
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, 2)
	ran := make([]bool, 2)
	goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		fs := s.(*hostsim.Stream)
		buf, err := d.Alloc(reduceop.Float32, 100+c.Rank()) // the ranks disagree
		if err != nil {
			return err
		}
		defer buf.Free()
		w := c.OnStream(fs).AllReduce(ctx, buf, reduceop.Sum)
		r := c.Rank()
		fs.Launch("consumer", func() { ran[r] = true })
		errs[r] = w.Wait(ctx)
		return fs.Synchronize(ctx)
	}, goccl.WithTimeout(10*time.Second))
	for r := range 2 {
		if !errors.Is(errs[r], goccl.ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, errs[r])
		}
		if !ran[r] {
			t.Errorf("rank %d: the consumer never ran: the stream is still held", r)
		}
	}
}

// A collective on a stream refuses a missing buffer and a missing stream
// before anything is queued.
func TestStreamOrderedRefusesBadArguments(t *testing.T) {
	d := hostsim.New()
	defer d.Close()
	runRanks(t, 1, "", func(ctx context.Context, c *goccl.Comm) error {
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		buf, err := d.Alloc(reduceop.Float32, 4)
		if err != nil {
			return err
		}
		defer buf.Free()
		if err := c.OnStream(s).AllReduce(ctx, nil, reduceop.Sum).Wait(ctx); !errors.Is(err, goccl.ErrInvalid) {
			t.Errorf("nil buffer: %v, want ErrInvalid", err)
		}
		if err := c.OnStream(nil).AllReduce(ctx, buf, reduceop.Sum).Wait(ctx); !errors.Is(err, goccl.ErrInvalid) {
			t.Errorf("nil stream: %v, want ErrInvalid", err)
		}
		return nil
	})
}

// Several collectives queued on one stream without a wait in between run
// one after the other, each after the work before it, and none waits on
// another's streams (each call has streams of its own).
func TestStreamOrderedCallsInFlight(t *testing.T) {
	const count = 1<<18 + 3
	devs := []*hostsim.Device{hostsim.New(hostsim.Latency{Copy: time.Millisecond}), hostsim.New(hostsim.Latency{Copy: time.Millisecond})}
	for _, d := range devs {
		defer d.Close()
	}
	runRanks(t, 2, "", func(ctx context.Context, c *goccl.Comm) error {
		d := devs[c.Rank()]
		s, err := d.NewStream()
		if err != nil {
			return err
		}
		defer s.Destroy()
		fs := s.(*hostsim.Stream)
		bufs := make([]*hostsim.Buffer, 4)
		for i := range bufs {
			b, err := d.Alloc(reduceop.Float32, count)
			if err != nil {
				return err
			}
			defer b.Free()
			bufs[i] = b.(*hostsim.Buffer)
		}
		v := float32(c.Rank() + 1)
		fs.Launch("producer", func() {
			for _, b := range bufs {
				for i, f := 0, float32s(b.Bytes()); i < len(f); i++ {
					f[i] = v
				}
			}
		})
		sc := c.OnStream(fs)
		var works []*goccl.Work
		for i, b := range bufs {
			if i%2 == 0 {
				works = append(works, sc.AllReduce(ctx, b, reduceop.Sum))
			} else {
				works = append(works, sc.Broadcast(ctx, b, 1))
			}
		}
		sums := make([]float32, len(bufs))
		fs.Launch("consumer", func() {
			for i, b := range bufs {
				f := float32s(b.Bytes())
				sums[i] = f[0] + f[len(f)-1]
			}
		})
		for i, w := range works {
			if err := w.Wait(ctx); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		if err := fs.Synchronize(ctx); err != nil {
			return err
		}
		for i, got := range sums {
			want := float32(6) // 3+3 for the allreduces
			if i%2 == 1 {
				want = 4 // rank 1's 2, twice
			}
			if got != want {
				return fmt.Errorf("rank %d call %d: consumer saw %v, want %v", c.Rank(), i, got, want)
			}
		}
		return nil
	})
}
