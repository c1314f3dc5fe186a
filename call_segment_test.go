package goccl_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// hinted is an endpoint that asks for segments of seg bytes
// (transport.SegmentHinter, as transport/shm does) and counts the sizes
// of the messages it sends.
type hinted struct {
	transport.Endpoint
	seg   int
	mu    sync.Mutex
	sizes map[int]int
}

func (h *hinted) SegmentBytes(peer int) int { return h.seg }

func (h *hinted) Isend(to int, tag transport.Tag, b []byte) transport.Request {
	h.mu.Lock()
	h.sizes[len(b)]++
	h.mu.Unlock()
	return h.Endpoint.Isend(to, tag, b)
}

// runHinted runs a ring allreduce of n float32 ones on two ranks whose
// endpoints ask for segments of segs[r] bytes, and returns each rank's
// error and the sizes of the messages each sent.
func runHinted(t *testing.T, n int, segs [2]int) ([2]error, [2]map[int]int) {
	t.Helper()
	var hs [2]*hinted
	comms := newComms(t, mem.New(2), func(r int, ep transport.Endpoint) (transport.Endpoint, goccl.Option) {
		hs[r] = &hinted{Endpoint: ep, seg: segs[r], sizes: map[int]int{}}
		return hs[r], goccl.WithAlgorithm(algo.Ring)
	})
	var errs [2]error
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			defer c.Close()
			buf := make([]float32, n)
			for i := range buf {
				buf[i] = 1
			}
			if errs[r] = c.AllReduce(context.Background(), buf, reduceop.Sum); errs[r] == nil {
				for i, v := range buf {
					if v != 2 {
						errs[r] = errors.New("wrong sum")
						t.Errorf("rank %d: element %d is %v, want 2", r, i, v)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return errs, [2]map[int]int{hs[0].sizes, hs[1].sizes}
}

// A group whose transport asks for other segments (transport/shm asks
// for megabytes) cuts its pipelined messages so, with the right sum; one
// whose transport asks for none keeps algo.DefaultSegmentBytes.
func TestSegmentHint(t *testing.T) {
	const n = 1 << 18 // 1 MiB: a 512 KiB half each, reduce-scattered in segments
	for _, tc := range []struct {
		seg, want, not int
	}{{64 << 10, 64 << 10, algo.DefaultSegmentBytes}, {0, algo.DefaultSegmentBytes, 64 << 10}} {
		errs, sizes := runHinted(t, n, [2]int{tc.seg, tc.seg})
		for r := range 2 {
			if errs[r] != nil {
				t.Fatalf("hint %d: rank %d: %v", tc.seg, r, errs[r])
			}
			if sizes[r][tc.want] == 0 || sizes[r][tc.not] != 0 {
				t.Errorf("hint %d: rank %d sent messages of these sizes: %v; want some of %d bytes, none of %d",
					tc.seg, r, sizes[r], tc.want, tc.not)
			}
		}
	}
}

// Ranks whose transports ask for different segments would misread each
// other's messages: their first call fails with ErrMismatch, naming the
// segment sizes.
func TestSegmentHintDiffers(t *testing.T) {
	errs, _ := runHinted(t, 1<<18, [2]int{64 << 10, 0})
	for r, err := range errs {
		if !errors.Is(err, goccl.ErrMismatch) || !strings.Contains(err.Error(), "segments of 65536 bytes") {
			t.Errorf("rank %d: %v, want ErrMismatch naming the segments", r, err)
		}
	}
}
