package goccl

import (
	"context"
	"encoding/binary"
	"hash/fnv"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/ring"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/reduceop"
)

// The coalesced collectives take a list of buffers of one dtype and move
// them as one call: one fingerprint, one place in the order of calls, one
// record in the comms log, and for the data the algorithm of the whole
// size, not one per buffer.
//
// Where that algorithm is the ring, it runs on the caller's slices as
// they lie (algo.Vec): the blocks and segments are cut from the run of
// all the slices, and a segment that spans two of them travels as two
// messages, so no byte is copied outside the caller's slices. The other
// algorithms (the board, recursive doubling, trees, halving) take one
// contiguous buffer, and there the slices are packed into a pooled one and
// unpacked after: the cost model picks them for messages small enough
// that their latency, not a copy, sets the time. Device buffers are
// packed too (their bytes are staged through host memory anyway).

// AllReduceCoalesced all-reduces several buffers of one dtype as one call
// (torch's all_reduce_coalesced). Every rank must pass buffers of the same
// lengths in the same order.
func (c *Comm) AllReduceCoalesced(ctx context.Context, bufs []any, op reduceop.Op) error {
	const name = commslog.AllReduceCoalesced
	views, total, err := c.checkList(name, "bufs", bufs)
	if err != nil {
		return err
	}
	if len(views) == 0 {
		return nil
	}
	dt := views[0].dt
	if err := c.checkOp(name, op, &views[0]); err != nil {
		return err
	}
	if len(views) == 1 {
		return checked(c.allReduceView(name, &views[0], op, "")).exec(ctx)
	}
	if c.inPlace(views, algo.AllReduce) {
		return c.allReduceParts(name, views, dt, total, op).laidOut(views).exec(ctx)
	}
	flat := scratch.Get(total * dt.Size())
	defer scratch.Put(flat)
	if err := c.pack(ctx, flat, views); err != nil {
		return &Error{Op: name, Rank: c.rank, Peer: -1, Err: err}
	}
	fv := view{dt: dt, n: total, b: flat}
	k, err := c.allReduceView(name, &fv, op, "")
	if err := checked(k.laidOut(views), err).exec(ctx); err != nil {
		return err
	}
	return c.unpack(ctx, flat, views)
}

// inPlace reports whether a coalesced call of coll runs on views where
// they lie: host buffers whose total size the ring moves, on more than
// one rank.
func (c *Comm) inPlace(views []view, coll algo.Collective) bool {
	bytes := 0
	for _, v := range views {
		if v.dev != nil {
			return false
		}
		bytes += v.bytes()
	}
	if c.Size() == 1 {
		return false
	}
	if coll == algo.AllGather {
		bytes *= c.Size()
	}
	return !(coll == algo.AllReduce && c.useBoard(bytes, true)) && c.choose(coll, bytes, "") == algo.Ring
}

// allReduceParts makes the call of a ring allreduce over the caller's
// host slices (views) as one run of total elements of dt.
func (c *Comm) allReduceParts(name string, views []view, dt reduceop.DType, total int, op reduceop.Op) *call {
	k := c.newCall(name, dt, total*dt.Size(), algo.Ring).agree(total, op, -1)
	p := c.peers(k, dt, reducer(reduceop.Host{}, dt, op))
	parts := make([][]byte, len(views))
	for i, v := range views {
		parts[i] = v.b
	}
	run := algo.Pieces(parts)
	k.run = func(ctx context.Context) error {
		if err := (ring.Options{}).AllReduceVec(ctx, p, run); err != nil {
			return err
		}
		if op == reduceop.Avg {
			for _, b := range parts {
				if err := (reduceop.Host{}).Scale(dt, b, c.Size()); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return k
}

// AllGatherCoalesced all-gathers several buffers of one dtype in one
// call: recv[i] receives every rank's send[i], rank j's part at element
// j*len(send[i]).
func (c *Comm) AllGatherCoalesced(ctx context.Context, send, recv []any) error {
	const name = commslog.AllGatherCoalesced
	if len(send) != len(recv) {
		return invalid(name, c.rank, "%d send buffers but %d recv buffers", len(send), len(recv))
	}
	svs, total, err := c.checkList(name, "send", send)
	if err != nil || len(svs) == 0 {
		return err
	}
	rvs, _, err := c.checkList(name, "recv", recv)
	if err != nil {
		return err
	}
	if err := sameType(name, c, svs[0], rvs[0]); err != nil {
		return err
	}
	for i := range svs {
		if rvs[i].n != svs[i].n*c.Size() {
			return invalid(name, c.rank, "recv[%d] has %d elements, want %d", i, rvs[i].n, svs[i].n*c.Size())
		}
	}
	if len(svs) == 1 {
		return checked(c.allGatherv(name, svs[0], rvs[0], equalCounts(c.Size(), total), rvs[0].bytes())).exec(ctx)
	}
	if c.inPlace(svs, algo.AllGather) && !anyDevice(rvs) {
		return c.allGatherParts(name, svs, rvs, total).laidOut(svs).exec(ctx)
	}
	esz := svs[0].dt.Size()
	n := c.Size()
	flat := scratch.Get(total * esz * n)
	defer scratch.Put(flat)
	fv := view{dt: svs[0].dt, n: total * n, b: flat}
	mine := view{dt: fv.dt, n: total, b: scratch.Get(total * esz)}
	defer scratch.Put(mine.b)
	if err := c.pack(ctx, mine.b, svs); err != nil {
		return &Error{Op: name, Rank: c.rank, Peer: -1, Err: err}
	}
	k, err := c.allGatherv(name, mine, fv, equalCounts(n, total), fv.bytes())
	if err := checked(k.laidOut(svs), err).exec(ctx); err != nil {
		return err
	}
	// flat holds, for each rank j, that rank's send buffers packed; move
	// part i of rank j to recv[i] block j.
	for i, rv := range rvs {
		off := 0
		for _, v := range svs[:i] {
			off += v.bytes()
		}
		part := svs[i].bytes()
		for j := 0; j < n; j++ {
			src := flat[j*total*esz+off:][:part]
			if err := c.copyTo(ctx, rv, j*part, src); err != nil {
				return &Error{Op: name, Rank: c.rank, Peer: -1, Err: err}
			}
		}
	}
	c.shared.packed.Add(int64(total * esz * n))
	return nil
}

// laidOut puts the lengths of a coalesced call's buffers in its
// fingerprint (a hash in a byte, never 0), so that ranks whose lists add
// up alike but are cut otherwise fail with ErrMismatch instead of
// reducing the joined runs: on a vectored link a range is one message
// whatever its cut. k may be nil (an argument error).
func (k *call) laidOut(views []view) *call {
	if k == nil {
		return k
	}
	h := fnv.New32a()
	var b [8]byte
	for _, v := range views {
		binary.LittleEndian.PutUint64(b[:], uint64(v.n))
		h.Write(b[:])
	}
	if k.layout = uint8(h.Sum32()); k.layout == 0 {
		k.layout = 1
	}
	return k
}

func anyDevice(views []view) bool {
	for _, v := range views {
		if v.dev != nil {
			return true
		}
	}
	return false
}

// allGatherParts makes the call of a ring allgather straight into the
// recv buffers: rank j's block of the run is recv[0]'s part j, then
// recv[1]'s part j, and so on, so each rank's send buffers are copied
// once into their own parts (as AllGather copies send into its block)
// and every other byte lands where it belongs.
func (c *Comm) allGatherParts(name string, svs, rvs []view, total int) *call {
	n, dt := c.Size(), svs[0].dt
	k := c.newCall(name, dt, total*n*dt.Size(), algo.Ring).agree(total*n, 0, -1)
	p := c.peers(k, dt, nil)
	parts := make([][]byte, 0, n*len(rvs))
	for j := range n {
		for i, rv := range rvs {
			m := svs[i].bytes()
			parts = append(parts, rv.b[j*m:(j+1)*m])
		}
	}
	run := algo.Pieces(parts)
	k.run = func(ctx context.Context) error {
		for i, sv := range svs {
			m := sv.bytes()
			copy(rvs[i].b[c.rank*m:(c.rank+1)*m], sv.b)
		}
		return (ring.Options{}).AllGatherVec(ctx, p, run, equalCounts(n, total))
	}
	return k
}
