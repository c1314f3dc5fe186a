package goccl

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/reduceop"
)

// staged is a buffer argument as host bytes: the user's own memory for a
// Go slice, or pooled host memory for a DeviceBuffer.
type staged struct {
	view
	host []byte
}

// stage makes v's bytes addressable; with load, a device buffer is copied
// to host first.
func stage(ctx context.Context, v view, load bool) (staged, error) {
	if v.dev == nil {
		return staged{v, v.b}, nil
	}
	s := staged{v, scratch.Get(v.bytes())}
	if load && len(s.host) > 0 {
		if err := v.dev.CopyToHost(ctx, s.host, 0); err != nil {
			scratch.Put(s.host)
			return staged{}, fmt.Errorf("copy device to host: %w", err)
		}
	}
	return s, nil
}

// unstage copies a device buffer's result back (with store) and frees the
// staging memory.
func (s staged) unstage(ctx context.Context, store bool) error {
	if s.dev == nil {
		return nil
	}
	defer scratch.Put(s.host)
	if store && len(s.host) > 0 {
		if err := s.dev.CopyFromHost(ctx, 0, s.host); err != nil {
			return fmt.Errorf("copy host to device: %w", err)
		}
	}
	return nil
}

func kernelOf(v view) reduceop.Kernel {
	if v.dev != nil {
		return v.dev.Kernel()
	}
	return reduceop.Host{}
}

// check resolves a buffer argument for op.
func (c *Comm) check(op string, what string, buf any) (view, error) {
	v, err := viewOf(buf)
	if err != nil {
		return v, invalid(op, c.rank, "%s: %v", what, err)
	}
	return v, nil
}

func (c *Comm) checkRoot(op string, root int) error {
	if root < 0 || root >= c.Size() {
		return invalid(op, c.rank, "root %d out of range [0,%d)", root, c.Size())
	}
	return nil
}

func (c *Comm) checkOp(op string, rop reduceop.Op, dt reduceop.DType) error {
	if err := reduceop.Check(rop, dt); err != nil {
		return invalid(op, c.rank, "%v", err)
	}
	return nil
}

func sameType(op string, c *Comm, a, b view) error {
	if a.dt != b.dt {
		return invalid(op, c.rank, "send is %v but recv is %v", a.dt, b.dt)
	}
	return nil
}

// checkPair resolves a send and a recv buffer of one dtype.
func (c *Comm) checkPair(op string, send, recv any) (sv, rv view, err error) {
	if sv, err = c.check(op, "send", send); err != nil {
		return
	}
	if rv, err = c.check(op, "recv", recv); err != nil {
		return
	}
	err = sameType(op, c, sv, rv)
	return
}

// checkScaled is checkPair for collectives whose bigger buffer holds
// Size() blocks of the smaller one (allgather, reduce-scatter, gather,
// scatter). sendBig says which side is the bigger.
func (c *Comm) checkScaled(op string, send, recv any, sendBig bool) (sv, rv view, err error) {
	if sv, rv, err = c.checkPair(op, send, recv); err != nil {
		return
	}
	small, big, smallName, bigName := sv, rv, "send", "recv"
	if sendBig {
		small, big, smallName, bigName = rv, sv, "recv", "send"
	}
	if big.n != small.n*c.Size() {
		err = invalid(op, c.rank, "%s has %d elements, want %d (size %d x %s %d)",
			bigName, big.n, small.n*c.Size(), c.Size(), smallName, small.n)
	}
	return
}

func (c *Comm) newCall(op string, dt reduceop.DType, bytes int, a algo.Algorithm) *call {
	return &call{c: c, op: op, dt: dt, bytes: int64(bytes), algo: string(a), root: -1}
}

// agree sets what the fingerprint makes every rank agree on.
func (k *call) agree(count int, redop reduceop.Op, root int) *call {
	k.count, k.redop, k.root = int64(count), redop, root
	k.silent = count == 0
	return k
}

// peers takes the call's tag (fixing its order among collectives) and
// returns the algo.Peers it runs on.
func (c *Comm) peers(k *call, dt reduceop.DType, reduce func(dst, src []byte) error) *peers {
	p := &peers{c: c, op: k.op, tag: c.order(), elem: dt.Size(), reduce: reduce}
	if !c.opts.noCheck {
		p.check = true
		p.fp = makeFingerprint(k, c.id, p.tag)
		c.shared.history.add(p.fp)
	}
	k.p = p
	return p
}

func equalCounts(n, each int) []int {
	counts := make([]int, n)
	for i := range counts {
		counts[i] = each
	}
	return counts
}

// ---- AllReduce ----

// AllReduce reduces buf across all ranks with op and leaves the result in
// every rank's buf (torch.distributed.all_reduce). Avg divides the sum by
// Size once, at the end.
func (c *Comm) AllReduce(ctx context.Context, buf any, op reduceop.Op) error {
	return checked(c.allReduce(commslog.AllReduce, buf, op, "")).exec(ctx)
}

// AllReduceAsync starts AllReduce and returns at once.
func (c *Comm) AllReduceAsync(ctx context.Context, buf any, op reduceop.Op) *Work {
	k, err := c.allReduce(commslog.AllReduce, buf, op, "")
	return start(ctx, checked(k, err))
}

// InferenceAllReduce is AllReduce on the latency-first path: it always
// takes the algorithm with the fewest message rounds (recursive doubling),
// whatever the size, as DeepSpeed's inference_all_reduce does for small
// activations.
func (c *Comm) InferenceAllReduce(ctx context.Context, buf any, op reduceop.Op) error {
	return checked(c.allReduce(commslog.InferenceAllReduce, buf, op, algo.Doubling)).exec(ctx)
}

func (c *Comm) allReduce(name string, buf any, op reduceop.Op, force algo.Algorithm) (*call, error) {
	v, err := c.check(name, "buf", buf)
	if err != nil {
		return nil, err
	}
	return c.allReduceView(name, v, op, force)
}

func (c *Comm) allReduceView(name string, v view, op reduceop.Op, force algo.Algorithm) (*call, error) {
	if err := c.checkOp(name, op, v.dt); err != nil {
		return nil, err
	}
	a, fn := c.pickAllReduce(v.bytes(), force)
	k := c.newCall(name, v.dt, v.bytes(), a).agree(v.n, op, -1)
	p := c.peers(k, v.dt, reducer(kernelOf(v), v.dt, op))
	n := c.Size()
	k.run = func(ctx context.Context) error {
		s, err := stage(ctx, v, true)
		if err != nil {
			return err
		}
		if n > 1 && len(s.host) > 0 {
			if err := fn(ctx, p, s.host); err != nil {
				s.unstage(ctx, false)
				return err
			}
		}
		if op == reduceop.Avg {
			if err := kernelOf(v).Scale(v.dt, s.host, n); err != nil {
				s.unstage(ctx, false)
				return err
			}
		}
		return s.unstage(ctx, true)
	}
	return k, nil
}

// AllReduceCoalesced all-reduces several buffers of one dtype as one
// message (torch's all_reduce_coalesced): they are packed into one scratch
// buffer, reduced, and unpacked.
func (c *Comm) AllReduceCoalesced(ctx context.Context, bufs []any, op reduceop.Op) error {
	const name = commslog.AllReduceCoalesced
	views, total, err := c.checkList(name, "bufs", bufs)
	if err != nil {
		return err
	}
	if len(views) == 0 {
		return nil
	}
	flat := scratch.Get(total * views[0].dt.Size())
	defer scratch.Put(flat)
	if err := pack(ctx, flat, views); err != nil {
		return &Error{Op: name, Rank: c.rank, Peer: -1, Err: err}
	}
	fv := view{dt: views[0].dt, n: total, b: flat}
	if err := checked(c.allReduceView(name, fv, op, "")).exec(ctx); err != nil {
		return err
	}
	return unpack(ctx, flat, views)
}

// checkList resolves a list of buffers that must share one dtype and
// returns the total element count.
func (c *Comm) checkList(op, what string, bufs []any) ([]view, int, error) {
	views := make([]view, len(bufs))
	total := 0
	for i, b := range bufs {
		v, err := c.check(op, fmt.Sprintf("%s[%d]", what, i), b)
		if err != nil {
			return nil, 0, err
		}
		if i > 0 && v.dt != views[0].dt {
			return nil, 0, invalid(op, c.rank, "%s[%d] is %v but %s[0] is %v", what, i, v.dt, what, views[0].dt)
		}
		views[i] = v
		total += v.n
	}
	return views, total, nil
}

// pack copies each view into consecutive parts of flat.
func pack(ctx context.Context, flat []byte, views []view) error {
	off := 0
	for _, v := range views {
		n := v.bytes()
		if v.dev != nil {
			if err := v.dev.CopyToHost(ctx, flat[off:off+n], 0); err != nil {
				return err
			}
		} else {
			copy(flat[off:off+n], v.b)
		}
		off += n
	}
	return nil
}

// unpack is the inverse of pack.
func unpack(ctx context.Context, flat []byte, views []view) error {
	off := 0
	for _, v := range views {
		n := v.bytes()
		if v.dev != nil {
			if err := v.dev.CopyFromHost(ctx, 0, flat[off:off+n]); err != nil {
				return err
			}
		} else {
			copy(v.b, flat[off:off+n])
		}
		off += n
	}
	return nil
}

// ---- Broadcast and Reduce ----

// Broadcast copies root's buf into every rank's buf.
func (c *Comm) Broadcast(ctx context.Context, buf any, root int) error {
	return checked(c.broadcast(buf, root)).exec(ctx)
}

// BroadcastAsync starts Broadcast and returns at once.
func (c *Comm) BroadcastAsync(ctx context.Context, buf any, root int) *Work {
	k, err := c.broadcast(buf, root)
	return start(ctx, checked(k, err))
}

func (c *Comm) broadcast(buf any, root int) (*call, error) {
	const name = commslog.Broadcast
	v, err := c.check(name, "buf", buf)
	if err != nil {
		return nil, err
	}
	if err := c.checkRoot(name, root); err != nil {
		return nil, err
	}
	a, fn := c.pickBroadcast(v.bytes())
	k := c.newCall(name, v.dt, v.bytes(), a).agree(v.n, 0, root)
	p := c.peers(k, v.dt, nil)
	isRoot := c.rank == root
	k.run = func(ctx context.Context) error {
		s, err := stage(ctx, v, isRoot)
		if err != nil {
			return err
		}
		if c.Size() > 1 && len(s.host) > 0 {
			if err := fn(ctx, p, s.host, root); err != nil {
				s.unstage(ctx, false)
				return err
			}
		}
		return s.unstage(ctx, !isRoot)
	}
	return k, nil
}

// Reduce reduces buf across ranks with op into root's buf. Other ranks'
// buf is left unchanged.
func (c *Comm) Reduce(ctx context.Context, buf any, op reduceop.Op, root int) error {
	return checked(c.reduce(buf, op, root)).exec(ctx)
}

// ReduceAsync starts Reduce and returns at once.
func (c *Comm) ReduceAsync(ctx context.Context, buf any, op reduceop.Op, root int) *Work {
	k, err := c.reduce(buf, op, root)
	return start(ctx, checked(k, err))
}

func (c *Comm) reduce(buf any, op reduceop.Op, root int) (*call, error) {
	const name = commslog.Reduce
	v, err := c.check(name, "buf", buf)
	if err != nil {
		return nil, err
	}
	if err := c.checkRoot(name, root); err != nil {
		return nil, err
	}
	if err := c.checkOp(name, op, v.dt); err != nil {
		return nil, err
	}
	a, fn := c.pickReduce(v.bytes())
	k := c.newCall(name, v.dt, v.bytes(), a).agree(v.n, op, root)
	p := c.peers(k, v.dt, reducer(kernelOf(v), v.dt, op))
	isRoot := c.rank == root
	k.run = func(ctx context.Context) error {
		// The algorithm uses a non-root's buffer as scratch, so non-roots
		// work on a copy.
		var host []byte
		var s staged
		if isRoot {
			var err error
			if s, err = stage(ctx, v, true); err != nil {
				return err
			}
			host = s.host
		} else {
			host = scratch.Get(v.bytes())
			defer scratch.Put(host)
			if err := pack(ctx, host, []view{v}); err != nil {
				return err
			}
		}
		if c.Size() > 1 && len(host) > 0 {
			if err := fn(ctx, p, host, root); err != nil {
				s.unstage(ctx, false)
				return err
			}
		}
		if !isRoot {
			return nil
		}
		if op == reduceop.Avg {
			if err := kernelOf(v).Scale(v.dt, host, c.Size()); err != nil {
				s.unstage(ctx, false)
				return err
			}
		}
		return s.unstage(ctx, true)
	}
	return k, nil
}

// ---- AllGather ----

// AllGather gathers every rank's send into recv, rank i's part at element
// i*len(send) (torch's all_gather_into_tensor). len(recv) must be
// Size()*len(send). send may alias its own block of recv.
func (c *Comm) AllGather(ctx context.Context, send, recv any) error {
	return checked(c.allGather(send, recv)).exec(ctx)
}

// AllGatherAsync starts AllGather and returns at once.
func (c *Comm) AllGatherAsync(ctx context.Context, send, recv any) *Work {
	k, err := c.allGather(send, recv)
	return start(ctx, checked(k, err))
}

func (c *Comm) allGather(send, recv any) (*call, error) {
	const name = commslog.AllGatherIntoTensor
	sv, rv, err := c.checkScaled(name, send, recv, false)
	if err != nil {
		return nil, err
	}
	return c.allGatherv(name, sv, rv, equalCounts(c.Size(), sv.n), rv.bytes())
}

// allGatherv gathers sv into rv with per-rank counts.
func (c *Comm) allGatherv(name string, sv, rv view, counts []int, logBytes int) (*call, error) {
	a, fn := c.pickAllGather(rv.bytes())
	k := c.newCall(name, rv.dt, logBytes, a).agree(rv.n, 0, -1)
	p := c.peers(k, rv.dt, nil)
	esz := rv.dt.Size()
	off := 0
	for _, n := range counts[:c.rank] {
		off += n * esz
	}
	k.run = func(ctx context.Context) error {
		s, err := stage(ctx, rv, false)
		if err != nil {
			return err
		}
		if err := pack(ctx, s.host[off:off+sv.bytes()], []view{sv}); err != nil {
			s.unstage(ctx, false)
			return err
		}
		if c.Size() > 1 && len(s.host) > 0 {
			if err := fn(ctx, p, s.host, counts); err != nil {
				s.unstage(ctx, false)
				return err
			}
		}
		return s.unstage(ctx, true)
	}
	return k, nil
}

// AllGatherList gathers every rank's send into recv[i] (torch's
// all_gather). The parts may differ in length (allgatherv), but
// len(recv[Rank()]) must equal len(send) and every rank must pass the same
// lengths.
func (c *Comm) AllGatherList(ctx context.Context, send any, recv []any) error {
	const name = commslog.AllGather
	sv, err := c.check(name, "send", send)
	if err != nil {
		return err
	}
	if len(recv) != c.Size() {
		return invalid(name, c.rank, "recv has %d buffers, want %d", len(recv), c.Size())
	}
	rvs, total, err := c.checkList(name, "recv", recv)
	if err != nil {
		return err
	}
	if err := sameType(name, c, sv, rvs[0]); err != nil {
		return err
	}
	if rvs[c.rank].n != sv.n {
		return invalid(name, c.rank, "recv[%d] has %d elements but send has %d", c.rank, rvs[c.rank].n, sv.n)
	}
	counts := make([]int, len(rvs))
	for i, v := range rvs {
		counts[i] = v.n
	}
	flat := scratch.Get(total * sv.dt.Size())
	defer scratch.Put(flat)
	fv := view{dt: sv.dt, n: total, b: flat}
	if err := checked(c.allGatherv(name, sv, fv, counts, fv.bytes())).exec(ctx); err != nil {
		return err
	}
	return unpack(ctx, flat, rvs)
}

// AllGatherCoalesced all-gathers several buffers of one dtype in one
// message: recv[i] receives every rank's send[i], rank j's part at element
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
	esz := svs[0].dt.Size()
	n := c.Size()
	flat := scratch.Get(total * esz * n)
	defer scratch.Put(flat)
	fv := view{dt: svs[0].dt, n: total * n, b: flat}
	mine := view{dt: fv.dt, n: total, b: scratch.Get(total * esz)}
	defer scratch.Put(mine.b)
	if err := pack(ctx, mine.b, svs); err != nil {
		return &Error{Op: name, Rank: c.rank, Peer: -1, Err: err}
	}
	if err := checked(c.allGatherv(name, mine, fv, equalCounts(n, total), fv.bytes())).exec(ctx); err != nil {
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
			if err := copyTo(ctx, rv, j*part, src); err != nil {
				return &Error{Op: name, Rank: c.rank, Peer: -1, Err: err}
			}
		}
	}
	return nil
}

// copyTo writes src into v at byte offset off.
func copyTo(ctx context.Context, v view, off int, src []byte) error {
	if v.dev != nil {
		return v.dev.CopyFromHost(ctx, off, src)
	}
	copy(v.b[off:], src)
	return nil
}

// ---- ReduceScatter ----

// ReduceScatter reduces send across ranks with op and leaves block Rank()
// of the result in recv (torch's reduce_scatter_tensor). len(send) must be
// Size()*len(recv).
func (c *Comm) ReduceScatter(ctx context.Context, send, recv any, op reduceop.Op) error {
	return checked(c.reduceScatter(send, recv, op)).exec(ctx)
}

// ReduceScatterAsync starts ReduceScatter and returns at once.
func (c *Comm) ReduceScatterAsync(ctx context.Context, send, recv any, op reduceop.Op) *Work {
	k, err := c.reduceScatter(send, recv, op)
	return start(ctx, checked(k, err))
}

func (c *Comm) reduceScatter(send, recv any, op reduceop.Op) (*call, error) {
	const name = commslog.ReduceScatterTensor
	sv, rv, err := c.checkScaled(name, send, recv, true)
	if err != nil {
		return nil, err
	}
	if err := c.checkOp(name, op, sv.dt); err != nil {
		return nil, err
	}
	return c.reduceScatterv(name, []view{sv}, rv, equalCounts(c.Size(), rv.n), op)
}

// reduceScatterv reduces the concatenation of parts with per-rank counts
// and leaves this rank's block in rv.
func (c *Comm) reduceScatterv(name string, parts []view, rv view, counts []int, op reduceop.Op) (*call, error) {
	total := 0
	for _, n := range counts {
		total += n
	}
	esz := rv.dt.Size()
	a, fn := c.pickReduceScatter(total * esz)
	k := c.newCall(name, rv.dt, total*esz, a).agree(total, op, -1)
	kern := kernelOf(parts[0])
	p := c.peers(k, rv.dt, reducer(kern, rv.dt, op))
	off := 0
	for _, n := range counts[:c.rank] {
		off += n * esz
	}
	k.run = func(ctx context.Context) error {
		work := scratch.Get(total * esz)
		defer scratch.Put(work)
		if err := pack(ctx, work, parts); err != nil {
			return err
		}
		if c.Size() > 1 && len(work) > 0 {
			if err := fn(ctx, p, work, counts); err != nil {
				return err
			}
		}
		mine := work[off : off+rv.bytes()]
		if op == reduceop.Avg {
			if err := kern.Scale(rv.dt, mine, c.Size()); err != nil {
				return err
			}
		}
		return copyTo(ctx, rv, 0, mine)
	}
	return k, nil
}

// ReduceScatterList reduces send across ranks, send[i] being the part
// that rank i receives reduced in recv (torch's reduce_scatter). Parts may
// differ in length, but len(recv) must equal len(send[Rank()]).
func (c *Comm) ReduceScatterList(ctx context.Context, send []any, recv any, op reduceop.Op) error {
	const name = commslog.ReduceScatter
	if len(send) != c.Size() {
		return invalid(name, c.rank, "send has %d buffers, want %d", len(send), c.Size())
	}
	svs, _, err := c.checkList(name, "send", send)
	if err != nil {
		return err
	}
	rv, err := c.check(name, "recv", recv)
	if err != nil {
		return err
	}
	if err := sameType(name, c, svs[0], rv); err != nil {
		return err
	}
	if rv.n != svs[c.rank].n {
		return invalid(name, c.rank, "recv has %d elements but send[%d] has %d", rv.n, c.rank, svs[c.rank].n)
	}
	if err := c.checkOp(name, op, rv.dt); err != nil {
		return err
	}
	counts := make([]int, len(svs))
	for i, v := range svs {
		counts[i] = v.n
	}
	return checked(c.reduceScatterv(name, svs, rv, counts, op)).exec(ctx)
}
