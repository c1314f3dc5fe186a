// Ring (chain) broadcast.
//
// The ranks form a chain starting at the root: root -> root+1 -> ... ->
// root-1 (mod n). The buffer is cut into S segments of at most
// Options.SegmentBytes; each rank forwards segment k to the next as soon as
// it has received it, while segment k+1 is still arriving, so after the
// pipeline fills every link is busy. Four ranks, root 0, three segments
// a b c (time runs down; each column is one link):
//
//	tick    0->1    1->2    2->3
//	1       a
//	2       b       a
//	3       c       b       a
//	4               c       b
//	5                       c
//
// Every non-root rank posts the receives of all segments at once, straight
// into its buffer; no copy and no scratch.
//
// Cost, with S = ⌈N/seg⌉ segments of N/S bytes:
//
//	T = (n+S-2)·(α + N/S·β)
//
// Counted exactly: the root sends S messages, the last rank of the chain
// receives S, every other rank receives S and sends S; N bytes each way.

package ring

import (
	"context"
	"fmt"

	"github.com/goccl/goccl/algo"
)

// Broadcast copies root's buf into every rank's buf with the zero Options.
func Broadcast(ctx context.Context, p algo.Peers, buf []byte, root int) error {
	return Options{}.Broadcast(ctx, p, buf, root)
}

// Broadcast copies root's buf into every rank's buf along a pipelined chain.
// It has the shape of algo.BroadcastFunc.
func (o Options) Broadcast(ctx context.Context, p algo.Peers, buf []byte, root int) error {
	if err := algo.CheckRoot(p, root); err != nil {
		return fmt.Errorf("ring broadcast: %w", err)
	}
	n, r := p.Size(), p.Rank()
	if n == 1 || len(buf) == 0 {
		return nil
	}
	seg := algo.SegmentLen(algo.SegmentFor(p, o.SegmentBytes), p.ElemSize())
	v := mod(r-root, n) // position in the chain
	next, prev := (r+1)%n, mod(r-1, n)
	var recvs, sends []algo.Request
	if v > 0 {
		for lo := 0; lo < len(buf); lo += seg {
			recvs = append(recvs, p.Irecv(prev, buf[lo:min(lo+seg, len(buf))]))
		}
	}
	for k, lo := 0, 0; lo < len(buf); k, lo = k+1, lo+seg {
		if v > 0 {
			if err := recvs[k].Wait(ctx); err != nil {
				return fmt.Errorf("ring broadcast: segment %d: recv from rank %d: %w", k, prev, err)
			}
		}
		if v < n-1 {
			sends = append(sends, p.Isend(next, buf[lo:min(lo+seg, len(buf))]))
		}
	}
	if err := algo.WaitAll(ctx, sends...); err != nil {
		return fmt.Errorf("ring broadcast: send to rank %d: %w", next, err)
	}
	return nil
}
