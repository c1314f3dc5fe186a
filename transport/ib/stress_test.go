package ib_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
)

// msg is message i from rank from to rank to under tag: its bytes are a
// function of all four, so a message out of order or mixed up shows.
func msg(from, to, tag, i, n int) []byte {
	b := make([]byte, n)
	x := uint32(from*1_000_003+to*10_007+tag*101+i) | 1
	for j := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[j] = byte(x)
	}
	return b
}

// TestStress sends, between every ordered pair of 3 ranks and under 3
// tags, sequences of messages whose sizes straddle the eager limit (a
// 256-byte slot: 208 bytes eager) and reach far into rendezvous, with 4
// credits, a registration cache smaller than one message, and receives
// posted at seeded random moments (before, during, after the sends). Each
// receive must get the message of its rank in the (peer, tag) sequence,
// byte for byte: the reference is the sequence itself. Run with and
// without a slow completion queue, by WRITE and by READ.
func TestStress(t *testing.T) {
	for _, tc := range []struct {
		delay time.Duration
		read  bool
	}{{0, false}, {100 * time.Microsecond, false}, {0, true}, {100 * time.Microsecond, true}} {
		delay := tc.delay
		t.Run(fmt.Sprintf("cq delay %v read %v", delay, tc.read), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			f := ibfake.New()
			f.SetCQDelay(delay)
			const size, tags, count = 3, 3, 40
			eps := connect(t, f, size, func(c *ib.Config) {
				c.SlotSize, c.RecvDepth, c.RegCacheBytes = 256, 4, 32<<10
				c.RendezvousRead = tc.read
			})
			closeAll(t, eps)
			sizes := []int{0, 1, 100, 207, 208, 209, 1000, 4099, 70000}
			seq := func(from, to, tag int) []int {
				r := rand.New(rand.NewPCG(uint64(from), uint64(to*10+tag)))
				out := make([]int, count)
				for i := range out {
					out[i] = sizes[r.IntN(len(sizes))]
				}
				return out
			}
			var wg sync.WaitGroup
			errc := make(chan error, size*size*tags*2)
			for from := range size {
				for to := range size {
					for tag := range tags {
						ns := seq(from, to, tag)
						wg.Go(func() {
							r := rand.New(rand.NewPCG(uint64(tag), uint64(from*10+to)))
							var reqs []transport.Request
							for i, n := range ns {
								reqs = append(reqs, eps[from].Isend(to, transport.Tag(tag), msg(from, to, tag, i, n)))
								if r.IntN(4) == 0 {
									time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
								}
							}
							for i, q := range reqs {
								if err := q.Wait(ctx); err != nil {
									errc <- fmt.Errorf("send %d->%d tag %d #%d: %w", from, to, tag, i, err)
									return
								}
							}
						})
						wg.Go(func() {
							r := rand.New(rand.NewPCG(uint64(to), uint64(from*10+tag)))
							var reqs []transport.Request
							bufs := make([][]byte, len(ns))
							for i, n := range ns {
								bufs[i] = make([]byte, n)
								reqs = append(reqs, eps[to].Irecv(from, transport.Tag(tag), bufs[i]))
								if r.IntN(3) == 0 {
									time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
								}
							}
							for i, q := range reqs {
								if err := q.Wait(ctx); err != nil {
									errc <- fmt.Errorf("recv %d->%d tag %d #%d: %w", from, to, tag, i, err)
									return
								}
								if !bytes.Equal(bufs[i], msg(from, to, tag, i, ns[i])) {
									errc <- fmt.Errorf("recv %d->%d tag %d #%d (%d bytes): out of order or corrupt", from, to, tag, i, ns[i])
									return
								}
							}
						})
					}
				}
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Error(err)
			}
		})
	}
}
