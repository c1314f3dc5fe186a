package goccl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// Send and Recv check dtype and length: a disagreement is ErrMismatch
// naming both sides, never reinterpreted bits, for small messages (the
// header inline) and large ones (the header apart), and for one of each.
func TestSendRecvTypesChecked(t *testing.T) {
	small, large := 5, 3000 // elements; large is over the 4 KiB inline limit as int32/float32
	cases := []struct {
		name       string
		send, recv any
		ok         bool
		words      []string
	}{
		{"same, small", make([]float32, small), make([]float32, small), true, nil},
		{"same, large", make([]float32, large), make([]float32, large), true, nil},
		{"dtype, small", make([]float32, small), make([]int32, small), false, []string{"dtype=int32", "dtype=float32"}},
		{"dtype, large", make([]float32, large), make([]int32, large), false, []string{"dtype=int32", "dtype=float32"}},
		{"new dtypes", make([]uint64, small), make([]complex64, small), false, []string{"dtype=complex64", "dtype=uint64"}},
		{"bool, named", make([]bool, small), make([]myBool, small), true, nil},
		{"count, small", make([]int64, small), make([]int64, small+1), false, []string{"count=6", "count=5"}},
		{"small into large", make([]int32, small), make([]int32, large), false, []string{"count=3000", "count=5"}},
		{"large into small", make([]int32, large), make([]int32, small), false, []string{"count=5", "count=3000"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			comms, err := goccl.NewLocal(2, goccl.WithTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, 2)
			go func() { errs <- comms[0].Send(ctx, tc.send, 1, 7) }()
			go func() { errs <- comms[1].Recv(ctx, tc.recv, 0, 7) }()
			e0, e1 := <-errs, <-errs
			for _, c := range comms {
				c.Close()
			}
			if tc.ok {
				if e0 != nil || e1 != nil {
					t.Fatalf("send %v, recv %v", e0, e1)
				}
				return
			}
			var rerr error
			for _, e := range []error{e0, e1} {
				if e != nil && strings.Contains(e.Error(), "recv") {
					rerr = e
				}
			}
			var ge *goccl.Error
			switch {
			case !errors.Is(rerr, goccl.ErrMismatch):
				t.Fatalf("receiver: %v, want ErrMismatch (sender: %v, %v)", rerr, e0, e1)
			case !errors.As(rerr, &ge) || ge.Peer != 0:
				t.Fatalf("receiver's error %v does not name rank 0", rerr)
			}
			for _, w := range tc.words {
				if !strings.Contains(rerr.Error(), w) {
					t.Errorf("%q does not say %q", rerr, w)
				}
			}
		})
	}
}

// The check's header travels with the payload: sends on one tag from
// several goroutines at once still pair with receives in order.
func TestSendRecvConcurrentSameTag(t *testing.T) {
	const msgs = 40
	err := goccl.RunLocal(context.Background(), 2, func(ctx context.Context, c *goccl.Comm) error {
		var works []*goccl.Work
		for i := range msgs {
			n := 1 + i%3*2000 // small and large, same dtype
			if c.Rank() == 0 {
				buf := make([]int32, n)
				buf[0] = int32(i)
				works = append(works, c.SendAsync(ctx, buf, 1, 3))
			} else {
				buf := make([]int32, n)
				w := c.RecvAsync(ctx, buf, 0, 3)
				works = append(works, w)
				if err := w.Wait(ctx); err != nil || buf[0] != int32(i) {
					return errors.Join(err, errors.New("out of order"))
				}
			}
		}
		for _, w := range works {
			if err := w.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}, goccl.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
}
