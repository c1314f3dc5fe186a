//go:build linux

package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport/shm"
)

// shmRing connects n goroutine ranks over shm, with the ring forced.
func shmRing(t *testing.T, n int) ([]*goccl.Comm, []*shm.Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	job := fmt.Sprintf("coal-%d", time.Now().UnixNano())
	comms, eps := make([]*goccl.Comm, n), make([]*shm.Endpoint, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for q := range n {
		wg.Go(func() {
			eps[q], errs[q] = shm.Connect(ctx, shm.Config{Rank: q, Size: n, JobID: job, Nonce: "coalesced"})
			if errs[q] != nil {
				return
			}
			if comms[q], errs[q] = goccl.New(eps[q], goccl.WithAlgorithm(algo.Ring), goccl.WithTimeout(20*time.Second)); errs[q] != nil {
				eps[q].Close()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(comms)
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(comms) })
	return comms, eps
}

// sends is how many messages ep has sent.
func sends(ep *shm.Endpoint) uint64 { s := ep.Stats(); return s.CopySends + s.CMASends }

// Over shm, whose endpoint has vectored messages, AllReduceCoalesced
// sends a range of the caller's slices as one message, pulled straight
// into the receiver's slices: it gives each slice's own allreduce, and
// sends exactly as many messages as AllReduce of one buffer of the same
// total (16 slices of 256 KiB: not one message a slice per range).
func TestCoalescedShmVectored(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			comms, eps := shmRing(t, n)
			const parts, m = 16, 32 << 10 // float64: 256 KiB a slice
			counts := make([][2]uint64, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Go(func() {
					ctx := context.Background()
					flat := make([]float64, parts*m)
					for j := range flat {
						flat[j] = coalescedInput(r, j/m, j%m)
					}
					s0 := sends(eps[r])
					if errs[r] = c.AllReduce(ctx, flat, reduceop.Sum); errs[r] != nil {
						return
					}
					s1 := sends(eps[r])
					bufs := make([]any, parts)
					for i := range bufs {
						b := make([]float64, m)
						for j := range b {
							b[j] = coalescedInput(r, i, j)
						}
						bufs[i] = b
					}
					if errs[r] = c.AllReduceCoalesced(ctx, bufs, reduceop.Sum); errs[r] != nil {
						return
					}
					counts[r] = [2]uint64{s1 - s0, sends(eps[r]) - s1}
					for i, b := range bufs {
						for j, x := range b.([]float64) {
							if x != flat[i*m+j] {
								errs[r] = fmt.Errorf("buffer %d element %d = %v, want %v", i, j, x, flat[i*m+j])
								return
							}
						}
					}
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r, k := range counts {
				if k[0] != k[1] {
					t.Errorf("rank %d: AllReduce sent %d messages, AllReduceCoalesced of 16 slices %d", r, k[0], k[1])
				}
			}
		})
	}
}
