//go:build cuda && cgo

package nccl_test

import (
	"errors"
	"testing"
	"time"

	"github.com/goccl/goccl/backend/nccl"
	"github.com/goccl/goccl/reduceop"
)

// TestP2P: Send and Recv of device buffers under the NCCL backend run on
// goccl's own path (NCCL matches a pair's sends in the order issued,
// whatever the tag, and orders them with the collectives on one stream):
// messages taken out of their order by tag, and both ranks sending before
// either receives, as goccl's calls allow.
func TestP2P(t *testing.T) { job(t, 2, "p2p", time.Minute, nil) }

// p2p: rank 0 sends two device messages, tags 1 then 2, that rank 1
// receives tag 2 first; then each sends to the other before either
// receives. goccl matches by tag, and its sends are posted at once; none
// of it goes to NCCL.
func (r *rank) p2p() bool {
	c, me := r.c, r.c.Rank()
	const m = 1000
	before := nccl.Issued()
	a := r.buf(reduceop.Float32, seq(m, func(i int) float64 { return float64(i) }))
	b := r.buf(reduceop.Float32, seq(m, func(i int) float64 { return float64(2 * i) }))
	defer a.Free()
	defer b.Free()
	if me == 0 {
		wa, wb := c.SendAsync(r.ctx, a, 1, 1), c.SendAsync(r.ctx, b, 1, 2)
		if err := errors.Join(wa.Wait(r.ctx), wb.Wait(r.ctx)); err != nil {
			r.failf("send: %v", err)
		}
	} else {
		gotB, gotA := r.buf(reduceop.Float32, make([]float64, m)), r.buf(reduceop.Float32, make([]float64, m))
		defer gotA.Free()
		defer gotB.Free()
		if err := errors.Join(c.Recv(r.ctx, gotB, 0, 2), c.Recv(r.ctx, gotA, 0, 1)); err != nil {
			r.failf("recv: %v", err)
		}
		r.check("tag 1", reduceop.Float32, r.read(gotA), r.read(a))
		r.check("tag 2", reduceop.Float32, r.read(gotB), r.read(b))
	}
	peer := 1 - me
	mine := r.buf(reduceop.Float32, seq(m, func(i int) float64 { return val(me, i) }))
	theirs := r.buf(reduceop.Float32, make([]float64, m))
	defer mine.Free()
	defer theirs.Free()
	w := c.SendAsync(r.ctx, mine, peer, 3)
	if err := errors.Join(c.Recv(r.ctx, theirs, peer, 3), w.Wait(r.ctx)); err != nil {
		r.failf("exchange: %v", err)
	}
	r.check("exchange", reduceop.Float32, r.read(theirs), seq(m, func(i int) float64 { return val(peer, i) }))
	if got := nccl.Issued() - before; got != 0 {
		r.failf("%d point-to-point calls ran on NCCL, want none", got)
	}
	return r.bad == 0
}
