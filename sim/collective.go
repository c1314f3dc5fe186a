package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/halving"
	"github.com/goccl/goccl/algo/ring"
	"github.com/goccl/goccl/algo/tree"
	"github.com/goccl/goccl/algo/twolevel"
)

// ErrWrong is returned (wrapped) by RunCollective when a run with real
// data ends with a buffer that differs from the sequential reference.
var ErrWrong = errors.New("sim: result differs from the sequential reference")

// Func returns algorithm a's function for collective c, as one of the
// algo.*Func types, or nil if a does not implement c.
func Func(c algo.Collective, a algo.Algorithm) any {
	switch c {
	case algo.AllReduce:
		return lookup(map[algo.Algorithm]algo.AllReduceFunc{algo.Ring: ring.AllReduce, algo.Tree: tree.AllReduce,
			algo.Halving: halving.AllReduce, algo.Doubling: halving.DoublingAllReduce, algo.TwoLevel: twolevel.AllReduce}, a)
	case algo.Broadcast:
		return lookup(map[algo.Algorithm]algo.BroadcastFunc{algo.Ring: ring.Broadcast, algo.Tree: tree.Broadcast, algo.TwoLevel: twolevel.Broadcast}, a)
	case algo.Reduce:
		return lookup(map[algo.Algorithm]algo.ReduceFunc{algo.Tree: tree.Reduce, algo.TwoLevel: twolevel.Reduce}, a)
	case algo.AllGather:
		return lookup(map[algo.Algorithm]algo.AllGatherFunc{algo.Ring: ring.AllGather, algo.Doubling: halving.AllGather, algo.TwoLevel: twolevel.AllGather}, a)
	case algo.ReduceScatter:
		return lookup(map[algo.Algorithm]algo.ReduceScatterFunc{algo.Ring: ring.ReduceScatter, algo.Halving: halving.ReduceScatter, algo.TwoLevel: twolevel.ReduceScatter}, a)
	case algo.Gather:
		return lookup(map[algo.Algorithm]algo.GatherFunc{algo.Tree: tree.Gather}, a)
	case algo.Scatter:
		return lookup(map[algo.Algorithm]algo.ScatterFunc{algo.Tree: tree.Scatter}, a)
	case algo.AllToAll:
		return lookup(map[algo.Algorithm]algo.AllToAllFunc{algo.Pairwise: algo.PairwiseAllToAll}, a)
	case algo.Barrier:
		if a == algo.Dissemination {
			return algo.BarrierFunc(algo.DisseminationBarrier)
		}
	}
	return nil
}

// lookup returns m[a], or an untyped nil if a is not in m.
func lookup[F any](m map[algo.Algorithm]F, a algo.Algorithm) any {
	if f, ok := m[a]; ok {
		return f
	}
	return nil
}

// RunCollective runs collective c with algorithm a on a buffer of size
// bytes (rounded down to whole elements; what the size means per
// collective is as in algo.Cost) and root 0, under cfg.
//
// With cfg.SizeOnly the buffers are reserved address space. Otherwise
// every rank's buffer holds int64s distinct per rank and element (cfg.Reduce
// defaults to an int64 sum, cfg.ElemSize to 8), and the result is checked
// against a sequential reference: a difference is an ErrWrong.
func RunCollective(ctx context.Context, cfg Config, c algo.Collective, a algo.Algorithm, size int) (*Result, error) {
	f := Func(c, a)
	if f == nil {
		return nil, fmt.Errorf("sim: %s does not implement %s", a, c)
	}
	withData := !cfg.SizeOnly
	if withData {
		if cfg.ElemSize == 0 {
			cfg.ElemSize = 8
		}
		if cfg.ElemSize != 8 {
			return nil, fmt.Errorf("sim: a run with data needs 8-byte elements, not %d", cfg.ElemSize)
		}
		if cfg.Reduce == nil {
			cfg.Reduce = sumInt64
		}
	} else if cfg.ElemSize == 0 {
		cfg.ElemSize = 4
	}
	n, es := cfg.Ranks, cfg.ElemSize
	count := size / es
	if c == algo.AllToAll {
		count = count / n * n // equal blocks, so that every rank's counts agree
	}
	counts := algo.EvenCounts(count, max(n, 1))
	var in, out [][]byte
	if withData {
		in = make([][]byte, n)
		out = make([][]byte, n)
		for r := range in {
			in[r] = make([]byte, count*es)
			for i := 0; i < count; i++ {
				binary.LittleEndian.PutUint64(in[r][8*i:], uint64(int64(r+1)*1_000_003+int64(i)))
			}
			out[r] = bytes.Clone(in[r])
		}
	}
	s, err := newSched(ctx, cfg)
	if err != nil {
		return nil, err
	}
	buf := func(p algo.Peers) []byte {
		if withData {
			return out[p.Rank()]
		}
		return s.mem.get(count * es)
	}
	run := func(ctx context.Context, p algo.Peers) error {
		switch f := f.(type) {
		case algo.AllReduceFunc:
			return f(ctx, p, buf(p))
		case algo.BroadcastFunc:
			return f(ctx, p, buf(p), 0)
		case algo.ReduceFunc:
			return f(ctx, p, buf(p), 0)
		case algo.AllGatherFunc:
			return f(ctx, p, buf(p), counts)
		case algo.ReduceScatterFunc:
			return f(ctx, p, buf(p), counts)
		case algo.GatherFunc:
			return f(ctx, p, buf(p), counts, 0)
		case algo.ScatterFunc:
			return f(ctx, p, buf(p), counts, 0)
		case algo.AllToAllFunc:
			var recv []byte
			if withData {
				recv = make([]byte, count*es)
			} else {
				recv = s.mem.get(count * es)
			}
			err := f(ctx, p, buf(p), counts, recv, counts)
			if withData {
				out[p.Rank()] = recv
			}
			return err
		case algo.BarrierFunc:
			return f(ctx, p)
		}
		return fmt.Errorf("sim: no runner for %T", f)
	}
	res, err := s.run(run)
	if err != nil {
		return res, fmt.Errorf("sim: %s %s on %d ranks, %d bytes: %w", a, c, n, size, err)
	}
	if withData {
		var err error
		if res.Wrong, err = check(c, in, out, counts); err != nil {
			return res, fmt.Errorf("sim: %s %s on %d ranks, %d bytes: %w", a, c, n, size, err)
		}
	}
	return res, nil
}

func sumInt64(dst, src []byte) error {
	if len(dst) != len(src) || len(dst)%8 != 0 {
		return fmt.Errorf("sim: int64 sum of %d and %d bytes", len(dst), len(src))
	}
	for i := 0; i < len(dst); i += 8 {
		v := binary.LittleEndian.Uint64(dst[i:]) + binary.LittleEndian.Uint64(src[i:])
		binary.LittleEndian.PutUint64(dst[i:], v)
	}
	return nil
}

// check compares the ranks' buffers after collective c with what the
// sequential definition of c gives for inputs in.
func check(c algo.Collective, in, out [][]byte, counts []int) (int64, error) {
	n := len(in)
	off := algo.Offsets(counts, 8)
	sum := bytes.Clone(in[0])
	for _, b := range in[1:] {
		if err := sumInt64(sum, b); err != nil {
			return 0, err
		}
	}
	var wrong int64
	first := ""
	note := func(r int, what string, got, want []byte) {
		k := int64(0)
		for i := 0; i+8 <= len(got); i += 8 {
			if !bytes.Equal(got[i:i+8], want[i:i+8]) {
				k++
			}
		}
		if k > 0 && first == "" {
			first = fmt.Sprintf("rank %d, %s", r, what)
		}
		wrong += k
	}
	for r := 0; r < n; r++ {
		blk := func(b []byte, i int) []byte { return b[off[i]:off[i+1]] }
		switch c {
		case algo.AllReduce:
			note(r, "the sum", out[r], sum)
		case algo.Broadcast:
			note(r, "the root's buffer", out[r], in[0])
		case algo.Reduce:
			if r == 0 {
				note(0, "the sum at the root", out[0], sum)
			}
		case algo.ReduceScatter:
			note(r, "its block of the sum", blk(out[r], r), blk(sum, r))
		case algo.AllGather, algo.Gather:
			if c == algo.Gather && r != 0 {
				continue
			}
			for i := 0; i < n; i++ {
				note(r, fmt.Sprintf("block %d", i), blk(out[r], i), blk(in[i], i))
			}
		case algo.Scatter:
			note(r, "its block of the root's buffer", blk(out[r], r), blk(in[0], r))
		case algo.AllToAll:
			for i := 0; i < n; i++ {
				note(r, fmt.Sprintf("block from rank %d", i), blk(out[r], i), blk(in[i], r))
			}
		}
	}
	if wrong > 0 {
		return wrong, fmt.Errorf("%w: %d elements, the first at %s", ErrWrong, wrong, first)
	}
	return 0, nil
}
