package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/internal/elems"
	"github.com/goccl/goccl/reduceop"
)

// The dtypes added after the first eight (issue 34): uint16, uint32,
// uint64, int16, bool, complex64, complex128.
var newDTypes = reduceop.DTypes[8:]

// roundTrip is v as an element of dt reads it back (bools are 0 or 1).
func roundTrip(dt reduceop.DType, v float64) float64 {
	s := elems.Make(dt, 1)
	elems.Set(s, 0, v)
	return elems.Get(s, 0)
}

// Every collective that moves data moves the new dtypes: world sizes that
// are not powers of two, blocks that are empty, single and odd.
func TestNewDTypesMove(t *testing.T) {
	if len(newDTypes) != 7 || newDTypes[0] != reduceop.Uint16 {
		t.Fatalf("newDTypes = %v", newDTypes)
	}
	for _, dt := range newDTypes {
		for _, n := range []int{1, 3, 5} {
			for _, m := range []int{0, 1, 7} {
				name := fmt.Sprintf("%v/n=%d/block=%d", dt, n, m)
				t.Run(name, func(t *testing.T) {
					runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
						return moveAll(ctx, t, c, dt, m)
					})
				})
			}
		}
	}
}

// moveAll runs broadcast, allgather, all-to-all, gather, scatter and a
// send/recv ring on blocks of m elements of dt and checks each result.
func moveAll(ctx context.Context, t *testing.T, c *goccl.Comm, dt reduceop.DType, m int) error {
	n, r := c.Size(), c.Rank()
	want := func(from, i int) float64 { return roundTrip(dt, float64((from*7+i)%5)) }
	input := func(k int) any {
		s := elems.Make(dt, k)
		for i := range k {
			elems.Set(s, i, float64((r*7+i%m)%5))
		}
		return s
	}
	expect := func(what string, g guarded, f func(i int) float64) error {
		g.checkGuards(t, what)
		for i := 0; i < g.n; i++ {
			if got, w := g.get(i), f(i); got != w {
				return fmt.Errorf("%s: element %d = %v, want %v", what, i, got, w)
			}
		}
		return nil
	}

	// Broadcast from the last rank.
	b := newGuarded(dt, m)
	for i := 0; i < m; i++ {
		b.set(i, float64((r*7+i)%5))
	}
	if err := c.Broadcast(ctx, b.buf(), n-1); err != nil {
		return fmt.Errorf("broadcast: %w", err)
	}
	if err := expect("broadcast", b, func(i int) float64 { return want(n-1, i) }); err != nil {
		return err
	}

	// AllGather: block j comes from rank j.
	ag := newGuarded(dt, n*m)
	if err := c.AllGather(ctx, input(m), ag.buf()); err != nil {
		return fmt.Errorf("allgather: %w", err)
	}
	if err := expect("allgather", ag, func(i int) float64 { return want(i/m, i%m) }); err != nil {
		return err
	}

	// AllToAll: every block of rank j's input is the same, so block j of
	// the result is rank j's.
	a2a := newGuarded(dt, n*m)
	if err := c.AllToAll(ctx, input(n*m), a2a.buf()); err != nil {
		return fmt.Errorf("alltoall: %w", err)
	}
	if err := expect("alltoall", a2a, func(i int) float64 { return want(i/m, i%m) }); err != nil {
		return err
	}

	// Gather to rank 0, then scatter from it.
	var gathered any
	var gg guarded
	if r == 0 {
		gg = newGuarded(dt, n*m)
		gathered = gg.buf()
	}
	if err := c.Gather(ctx, input(m), gathered, 0); err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	if r == 0 {
		if err := expect("gather", gg, func(i int) float64 { return want(i/m, i%m) }); err != nil {
			return err
		}
	}
	sc := newGuarded(dt, m)
	if err := c.Scatter(ctx, gathered, sc.buf(), 0); err != nil {
		return fmt.Errorf("scatter: %w", err)
	}
	if err := expect("scatter", sc, func(i int) float64 { return want(r, i) }); err != nil {
		return err
	}

	// Send/recv around the ring.
	if n > 1 {
		next, prev := (r+1)%n, (r+n-1)%n
		w := c.SendAsync(ctx, input(m), next, 7)
		rv := newGuarded(dt, m)
		if err := c.Recv(ctx, rv.buf(), prev, 7); err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		if err := w.Wait(ctx); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if err := expect("recv", rv, func(i int) float64 { return want(prev, i) }); err != nil {
			return err
		}
	}
	return nil
}

// Every op the new dtypes take reduces, in AllReduce, Reduce and
// ReduceScatter, as the sequential reference does: on the board (7
// elements) and over messages (1031), and for nothing at all.
func TestNewDTypesReduce(t *testing.T) {
	for _, dt := range newDTypes {
		for _, op := range reduceop.Ops {
			if reduceop.Check(op, dt) != nil {
				continue
			}
			for _, n := range []int{3, 5} {
				for _, cnt := range []int{0, 7, 1031} {
					name := fmt.Sprintf("%v/%v/n=%d/count=%d", dt, op, n, cnt)
					t.Run(name, func(t *testing.T) {
						all := reference(dt, op, n, span(0, cnt))
						m := cnt / n // the reduce-scatter block: n*m elements of the cnt
						runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
							r := c.Rank()
							mk := func(k int) guarded {
								g := newGuarded(dt, k)
								for i := 0; i < k; i++ {
									g.set(i, val(op, r, i))
								}
								return g
							}
							g := mk(cnt)
							if err := c.AllReduce(ctx, g.buf(), op); err != nil {
								return fmt.Errorf("allreduce: %w", err)
							}
							g.checkGuards(t, "allreduce")
							if err := check(g, all); err != nil {
								return fmt.Errorf("allreduce: %w", err)
							}
							g = mk(cnt)
							if err := c.Reduce(ctx, g.buf(), op, 1); err != nil {
								return fmt.Errorf("reduce: %w", err)
							}
							g.checkGuards(t, "reduce")
							if r == 1 {
								if err := check(g, all); err != nil {
									return fmt.Errorf("reduce: %w", err)
								}
							}
							send := mk(n * m)
							recv := newGuarded(dt, m)
							if err := c.ReduceScatter(ctx, send.buf(), recv.buf(), op); err != nil {
								return fmt.Errorf("reducescatter: %w", err)
							}
							recv.checkGuards(t, "reducescatter")
							if err := check(recv, all[r*m:(r+1)*m]); err != nil {
								return fmt.Errorf("reducescatter: %w", err)
							}
							return nil
						})
					})
				}
			}
		}
	}
}

type (
	myFloat   float32
	myUint64  uint64
	myBool    bool
	myComplex complex128
	bfloat16  uint16 // as a framework spells it: the Go type cannot say the format
	halves    []reduceop.BF16
)

// A slice of a named type is taken by its underlying type; a named slice
// of reduceop.BF16 is still bfloat16; int, uint and anything not a slice
// of a fixed-size number are refused.
func TestNamedTypes(t *testing.T) {
	for _, c := range []struct {
		buf any
		n   int
		dt  reduceop.DType
	}{
		{make([]myFloat, 3), 3, reduceop.Float32},
		{make([]myUint64, 2), 2, reduceop.Uint64},
		{[]myBool(nil), 0, reduceop.Bool},
		{make([]myComplex, 5), 5, reduceop.Complex128},
		{make([]bfloat16, 4), 4, reduceop.Uint16},
		{make(halves, 4), 4, reduceop.BFloat16},
		{goccl.As(make([]bfloat16, 4), reduceop.BFloat16), 4, reduceop.BFloat16},
	} {
		n, err := goccl.BufferLen(c.buf)
		if err != nil || n != c.n || len(goccl.Bytes(c.buf)) != c.n*c.dt.Size() {
			t.Errorf("%T: BufferLen = %d, %v; %d bytes; want %d elements of %v", c.buf, n, err, len(goccl.Bytes(c.buf)), c.n, c.dt)
		}
	}
	for _, buf := range []any{make([]int, 2), make([]uint, 2), make([]uintptr, 1), []string{"x"}, 3.5, [2]float32{}, make([][]float32, 1)} {
		if _, err := goccl.BufferLen(buf); err == nil || !strings.Contains(err.Error(), "unsupported buffer type") {
			t.Errorf("BufferLen(%T) = %v, want unsupported buffer type", buf, err)
		}
	}

	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		r := c.Rank()
		f := []myFloat{myFloat(r), 1.5}
		if err := c.AllReduce(ctx, f, reduceop.Avg); err != nil {
			return err
		}
		if !slices.Equal(f, []myFloat{1, 1.5}) {
			return fmt.Errorf("avg of []myFloat = %v", f)
		}
		u := []myUint64{math.MaxUint64 - myUint64(r), 1 << 63}
		if err := c.Broadcast(ctx, u, 2); err != nil {
			return err
		}
		if !slices.Equal(u, []myUint64{math.MaxUint64 - 2, 1 << 63}) {
			return fmt.Errorf("broadcast of []myUint64 = %v", u)
		}
		bs := make([]myBool, 2*c.Size())
		if err := c.AllGather(ctx, []myBool{r == 1, true}, bs); err != nil {
			return err
		}
		if !slices.Equal(bs, []myBool{false, true, true, true, false, true}) {
			return fmt.Errorf("allgather of []myBool = %v", bs)
		}
		next, prev := (r+1)%3, (r+2)%3
		w := c.SendAsync(ctx, []myComplex{myComplex(complex(float64(r), -1))}, next, 3)
		got := make([]myComplex, 1)
		if err := c.Recv(ctx, got, prev, 3); err != nil {
			return err
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
		if got[0] != myComplex(complex(float64(prev), -1)) {
			return fmt.Errorf("recv of []myComplex = %v", got)
		}
		h := halves{reduceop.BF16FromFloat32(float32(r))}
		if err := c.AllReduce(ctx, h, reduceop.Avg); err != nil {
			return err
		}
		if h[0].Float32() != 1 {
			return fmt.Errorf("avg of halves = %v", h)
		}
		return nil
	})
}

// A named uint16 is a uint16 unless As says otherwise: As(buf, BFloat16)
// reduces it as bfloat16; without As, Sum adds bit patterns as integers
// and Avg is ErrInvalid, with nothing sent.
func TestAsBFloat16(t *testing.T) {
	bits := func(f float32) bfloat16 { return bfloat16(reduceop.BF16FromFloat32(f)) }
	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		r := c.Rank()
		x := []bfloat16{bits(float32(r) + 0.5), bits(-2)}
		v := goccl.As(x, reduceop.BFloat16)
		if v.Err() != nil || v.DType() != reduceop.BFloat16 || v.Len() != 2 {
			return fmt.Errorf("As: %v, %v, %d", v.Err(), v.DType(), v.Len())
		}
		if err := c.AllReduce(ctx, v, reduceop.Avg); err != nil {
			return err
		}
		if x[0] != bits(1.5) || x[1] != bits(-2) {
			return fmt.Errorf("avg through As = %#x, want %#x %#x", x, bits(1.5), bits(-2))
		}

		before := c.Traffic().Total().SentMsgs
		if err := c.AllReduce(ctx, x, reduceop.Avg); !errors.Is(err, goccl.ErrInvalid) || !strings.Contains(err.Error(), "uint16") {
			return fmt.Errorf("avg of a named uint16 without As = %v, want ErrInvalid naming uint16", err)
		}
		if sent := c.Traffic().Total().SentMsgs - before; sent != 0 {
			return fmt.Errorf("a refused avg sent %d messages", sent)
		}
		y := []bfloat16{bits(-2)} // 0xc000
		if err := c.AllReduce(ctx, y, reduceop.Sum); err != nil {
			return err
		}
		if y[0] != bits(2) { // 3 x 0xc000 wraps to 0x4000, the pattern of +2
			return fmt.Errorf("sum of a named uint16 = %#x, want %#x", y[0], bits(2))
		}

		d := hostsim.New()
		defer d.Close()
		db, err := d.Alloc(reduceop.Uint16, 2)
		if err != nil {
			return err
		}
		defer db.Free()
		for _, bad := range []goccl.Typed{
			goccl.As(make([]float32, 2), reduceop.BFloat16), // 4-byte elements
			goccl.As(make([]int, 2), reduceop.Int64),        // not a buffer type
			goccl.As(db, reduceop.BFloat16),                 // a device buffer has its own dtype
			goccl.As(x, reduceop.DType(0)),
		} {
			if bad.Err() == nil {
				return fmt.Errorf("As: no error for %v", bad)
			}
			if err := c.Broadcast(ctx, bad, 0); !errors.Is(err, goccl.ErrInvalid) || !strings.Contains(err.Error(), "As(") {
				return fmt.Errorf("broadcast of a bad As = %v, want ErrInvalid naming As", err)
			}
		}
		// As of a Typed re-types it; int16 and uint16 have the same size.
		if v := goccl.As(goccl.As(x, reduceop.BFloat16), reduceop.Int16); v.Err() != nil || v.DType() != reduceop.Int16 {
			return fmt.Errorf("As of As: %v, %v", v.DType(), v.Err())
		}
		return nil
	})
}

// An op the dtype cannot take is ErrInvalid on every rank before anything
// is sent: on host buffers by reduceop.Check, and on device buffers also
// for the dtypes without a device kernel, which move all the same.
func TestRefusedOpsSendNothing(t *testing.T) {
	d := hostsim.New()
	defer d.Close()
	type refused struct {
		dt  reduceop.DType
		op  reduceop.Op
		dev bool
	}
	cases := []refused{
		{reduceop.Bool, reduceop.Sum, false}, {reduceop.Bool, reduceop.Prod, false}, {reduceop.Bool, reduceop.Avg, false},
		{reduceop.Complex64, reduceop.Max, false}, {reduceop.Complex128, reduceop.BXor, false},
		{reduceop.Uint32, reduceop.Avg, false}, {reduceop.Int16, reduceop.Avg, false}, {reduceop.Uint64, reduceop.Avg, false},
		{reduceop.Float32, reduceop.BAnd, false},
		// No device kernel: refused on a device buffer, though the host takes it.
		{reduceop.Uint64, reduceop.Sum, true}, {reduceop.Bool, reduceop.BOr, true},
		{reduceop.Complex64, reduceop.Sum, true}, {reduceop.Int16, reduceop.Max, true},
	}
	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		for _, rc := range cases {
			buf, rbuf := elems.Make(rc.dt, 6), elems.Make(rc.dt, 2)
			if rc.dev {
				b, err := d.Alloc(rc.dt, 6)
				if err != nil {
					return err
				}
				rb, err := d.Alloc(rc.dt, 2)
				if err != nil {
					return err
				}
				defer b.Free()
				defer rb.Free()
				buf, rbuf = b, rb
			}
			before := c.Traffic().Total().SentMsgs
			for name, err := range map[string]error{
				"allreduce":     c.AllReduce(ctx, buf, rc.op),
				"reduce":        c.Reduce(ctx, buf, rc.op, 0),
				"reducescatter": c.ReduceScatter(ctx, buf, rbuf, rc.op),
			} {
				if !errors.Is(err, goccl.ErrInvalid) || !strings.Contains(err.Error(), rc.dt.String()) {
					return fmt.Errorf("%s %v on %v (device %v) = %v, want ErrInvalid naming %v", name, rc.op, rc.dt, rc.dev, err, rc.dt)
				}
			}
			if sent := c.Traffic().Total().SentMsgs - before; sent != 0 {
				return fmt.Errorf("refused %v on %v sent %d messages", rc.op, rc.dt, sent)
			}
		}
		// The host reduces what the device may not.
		u := []uint64{math.MaxUint64, uint64(c.Rank())}
		if err := c.AllReduce(ctx, u, reduceop.Sum); err != nil {
			return err
		}
		if !slices.Equal(u, []uint64{math.MaxUint64 - 2, 3}) {
			return fmt.Errorf("uint64 sum = %v", u)
		}
		// A device buffer of a dtype without a kernel moves.
		b, err := d.Alloc(reduceop.Complex128, 2)
		if err != nil {
			return err
		}
		defer b.Free()
		hb := b.(*hostsim.Buffer)
		copy(hb.Bytes(), goccl.Bytes([]complex128{complex(float64(c.Rank()), 1), -1i}))
		if err := c.Broadcast(ctx, b, 2); err != nil {
			return err
		}
		if got, want := hb.Bytes(), goccl.Bytes([]complex128{complex(2, 1), -1i}); string(got) != string(want) {
			return fmt.Errorf("device broadcast of complex128: %x, want %x", got, want)
		}
		return nil
	})
}

// The unnamed slice types resolve without allocating.
func TestBufferTypesDoNotAllocate(t *testing.T) {
	for _, dt := range reduceop.DTypes {
		var buf any = elems.Make(dt, 8)
		if a := testing.AllocsPerRun(100, func() {
			if n, err := goccl.BufferLen(buf); err != nil || n != 8 {
				t.Fatal(n, err)
			}
		}); a != 0 {
			t.Errorf("BufferLen(%T): %v allocations", buf, a)
		}
	}
}

// The comms log names the new dtypes as torch does, and an As view by the
// dtype it gives.
func TestCommsLogNamesNewDTypes(t *testing.T) {
	logs := make([][]string, 2)
	err := goccl.RunLocal(context.Background(), 2, func(ctx context.Context, c *goccl.Comm) error {
		if err := c.AllReduce(ctx, make([]complex128, 3), reduceop.Sum); err != nil {
			return err
		}
		if err := c.Broadcast(ctx, make([]bool, 5), 0); err != nil {
			return err
		}
		if err := c.AllReduce(ctx, goccl.As(make([]bfloat16, 2), reduceop.BFloat16), reduceop.Max); err != nil {
			return err
		}
		if err := c.AllGather(ctx, make([]myUint64, 1), make([]uint64, 2)); err != nil {
			return err
		}
		for _, r := range c.CommsLog().Records() {
			logs[c.Rank()] = append(logs[c.Rank()], r.DType)
		}
		return nil
	}, goccl.WithCommsLog(commslog.Config{Enabled: true}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"complex128", "bool", "bfloat16", "uint64"}
	for r, got := range logs {
		if !slices.Equal(got, want) {
			t.Errorf("rank %d logged dtypes %v, want %v", r, got, want)
		}
	}
}
