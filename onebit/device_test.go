package onebit_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/onebit"
	"github.com/goccl/goccl/reduceop"
)

// TestCompressedAllReduceOnDevice runs the compressed allreduce on hostsim
// device buffers, each step's kernels queued on a stream and the exchanges
// going through goccl's device data path, beside the host algorithm on the
// same inputs in the same communicator, for three steps of error feedback:
// outputs and both error buffers must be bit for bit the host's.
func TestCompressedAllReduceOnDevice(t *testing.T) {
	for _, p := range []int{1, 2, 3, 4} {
		for _, n := range []int{0, 1, 13, 1000, 4099} {
			t.Run(fmt.Sprintf("p=%d/n=%d", p, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				err := goccl.RunLocal(ctx, p, func(ctx context.Context, c *goccl.Comm) error {
					return compareWithHost(ctx, c, n, 3)
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func compareWithHost(ctx context.Context, c *goccl.Comm, n, steps int) error {
	p, rank := c.Size(), c.Rank()
	d := hostsim.New(hostsim.Latency{Kernel: 20 * time.Microsecond}) // kernels late: ordering must hold anyway
	defer d.Close()
	s, err := d.NewStream()
	if err != nil {
		return err
	}
	st, err := onebit.NewState(n, p)
	if err != nil {
		return err
	}
	dst, err := onebit.NewDeviceState(d, hostsim.OneBitKernel{}, n, p)
	if err != nil {
		return err
	}
	defer dst.Free()
	buf, err := d.Alloc(reduceop.Float32, n)
	if err != nil {
		return err
	}
	pin, err := d.AllocHost(max(4*dst.PaddedLen(), 4))
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(uint64(n), uint64(rank)))
	for step := range steps {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		if n > 2 {
			x[1] = float32(math.Copysign(0, -1)) // -0 packs as positive
		}
		h := pin.Bytes()
		putF32(h, x) // the device's input, before the host call overwrites x
		if err := onebit.CompressedAllReduce(ctx, c, x, st); err != nil {
			return err
		}
		if err := s.CopyFromHost(buf, 0, h[:4*n]); err != nil {
			return err
		}
		if err := onebit.CompressedAllReduceOn(ctx, c, s, buf, dst); err != nil {
			return err
		}
		if n > 0 {
			for _, cmp := range []struct {
				what string
				b    device.Buffer
				want []uint8
			}{{"worker signs", dst.WorkerSigns(), st.WorkerSigns()}, {"server signs", dst.ServerSigns(), st.ServerSigns()}} {
				got := make([]byte, cmp.b.Len())
				if err := s.CopyToHost(h[:len(got)], cmp.b, 0); err != nil {
					return err
				}
				if err := s.Synchronize(ctx); err != nil {
					return err
				}
				copy(got, h)
				if string(got) != string(cmp.want) {
					return fmt.Errorf("rank %d step %d: %s differ from the host's", rank, step, cmp.what)
				}
			}
		} else if dst.WorkerSigns() != nil || dst.ServerScales() != nil {
			return fmt.Errorf("rank %d: a zero-length call has a last step on the device", rank)
		}
		for _, cmp := range []struct {
			what string
			b    device.Buffer
			want []float32
		}{{"output", buf, x}, {"worker error", dst.WorkerError(), st.WorkerError()}, {"server error", dst.ServerError(), st.ServerError()},
			{"worker scales", dst.WorkerScales(), st.WorkerScales()}, {"server scales", dst.ServerScales(), st.ServerScales()}} {
			if cmp.b == nil {
				continue // n == 0: no last step, checked above
			}
			got, err := readF32(ctx, s, cmp.b, h)
			if err != nil {
				return err
			}
			for i := range cmp.want {
				if math.Float32bits(got[i]) != math.Float32bits(cmp.want[i]) {
					return fmt.Errorf("rank %d step %d: %s[%d] = %v on the device, %v on the host", rank, step, cmp.what, i, got[i], cmp.want[i])
				}
			}
		}
	}
	return nil
}

func putF32(h []byte, x []float32) {
	for i, v := range x {
		binary.NativeEndian.PutUint32(h[4*i:], math.Float32bits(v))
	}
}

func readF32(ctx context.Context, s device.Stream, b device.Buffer, h []byte) ([]float32, error) {
	n := b.Len()
	if err := s.CopyToHost(h[:4*n], b, 0); err != nil {
		return nil, err
	}
	if err := s.Synchronize(ctx); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.NativeEndian.Uint32(h[4*i:]))
	}
	return out, nil
}

// TestCompressedAllReduceOnRefuses: arguments that do not fit are refused
// before any collective starts (both ranks make the same bad call, so a
// collective would not hang, but it would show in the error).
func TestCompressedAllReduceOnRefuses(t *testing.T) {
	d, other := hostsim.New(), hostsim.New()
	defer d.Close()
	defer other.Close()
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	st, err := onebit.NewDeviceState(d, hostsim.OneBitKernel{}, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Free()
	alloc := func(d *hostsim.Device, dt reduceop.DType, n int) device.Buffer {
		b, err := d.Alloc(dt, n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		buf  device.Buffer
		size int
		want string
	}{
		{"short buffer", alloc(d, reduceop.Float32, 9), 2, "has 9 elements"},
		{"float64 buffer", alloc(d, reduceop.Float64, 10), 2, "want float32"},
		{"other device", alloc(other, reduceop.Float32, 10), 2, "DeviceState on"},
		{"world of 3", alloc(d, reduceop.Float32, 10), 3, "communicator has 3 ranks"},
		{"not a Slicer", plainBuffer{alloc(d, reduceop.Float32, 10)}, 2, "not a device.Slicer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := goccl.RunLocal(ctx, tc.size, func(ctx context.Context, c *goccl.Comm) error {
				if c.Rank() != 0 {
					return nil // rank 0 alone: a collective would wait for ever
				}
				return onebit.CompressedAllReduceOn(ctx, c, s, tc.buf, st)
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) || ctx.Err() != nil {
				t.Fatalf("err = %v, want one saying %q before ctx ends", err, tc.want)
			}
		})
	}
	if err := st.Free(); err != nil {
		t.Fatal(err)
	}
	err = onebit.CompressedAllReduceOn(t.Context(), nil, s, alloc(d, reduceop.Float32, 10), st)
	if err == nil {
		t.Fatal("nil Comm accepted")
	}
}

// plainBuffer hides the Slicer methods of a Buffer.
type plainBuffer struct{ b device.Buffer }

func (p plainBuffer) DType() reduceop.DType { return p.b.DType() }
func (p plainBuffer) Len() int              { return p.b.Len() }
func (p plainBuffer) Device() device.Device { return p.b.Device() }
func (p plainBuffer) Free() error           { return p.b.Free() }
