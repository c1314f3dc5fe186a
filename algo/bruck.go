// Bruck allgather.
//
// In round k (d = 2^k) rank r sends the blocks it has gathered, those of
// ranks r .. r+d-1 (mod n), to rank r-d, and receives those of ranks
// r+d .. r+2d-1 from rank r+d; the last round sends only the n-d blocks
// still missing. After ⌈log2 n⌉ rounds every rank has every block, for
// any n, with no fold-in. Four ranks, blocks A B C D:
//
//	round 0 (d=1):  0 <- 1 B,   1 <- 2 C,   2 <- 3 D,   3 <- 0 A
//	                0 has A B,  1 has B C,  2 has C D,  3 has D A
//	round 1 (d=2):  0 <- 2 C D, 1 <- 3 D A, 2 <- 0 A B, 3 <- 1 B C
//
// Its partners are those of the dissemination barrier, r±2^k: a rank sends
// only to the ranks r-2^k, known before the first round, so a caller can
// look up those peers' addresses first (goccl's Init under lazy links
// does, then shares every rank's address this way).
//
// Cost, with N the bytes of the whole gathered buffer:
//
//	T = ⌈log2 n⌉·α + (n-1)/n·N·β

package algo

import (
	"context"
	"fmt"
)

var _ AllGatherFunc = BruckAllGather

// BruckAllGather starts with this rank's block (counts[Rank()] elements at
// its offset) in place in buf and leaves every rank's block in every buf.
// It has the shape of AllGatherFunc.
func BruckAllGather(ctx context.Context, p Peers, buf []byte, counts []int) error {
	if err := CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("bruck allgather: %w", err)
	}
	n, r := p.Size(), p.Rank()
	off := Offsets(counts, p.ElemSize())
	// blocks returns the bytes of the m blocks from rank first on.
	span := func(first, m int) int {
		s := 0
		for i := range m {
			q := (first + i) % n
			s += off[q+1] - off[q]
		}
		return s
	}
	for k, d := 0, 1; d < n; k, d = k+1, d*2 {
		m := min(d, n-d)
		to, from := (r-d+n)%n, (r+d)%n
		send := make([]byte, 0, span(r, m))
		for i := range m {
			q := (r + i) % n
			send = append(send, buf[off[q]:off[q+1]]...)
		}
		recv := make([]byte, span(from, m))
		rr := p.Irecv(from, recv)
		sr := p.Isend(to, send)
		if err := rr.Wait(ctx); err != nil {
			return fmt.Errorf("bruck allgather round %d: recv from rank %d: %w", k, from, err)
		}
		if err := sr.Wait(ctx); err != nil {
			return fmt.Errorf("bruck allgather round %d: send to rank %d: %w", k, to, err)
		}
		at := 0
		for i := range m {
			q := (from + i) % n
			at += copy(buf[off[q]:off[q+1]], recv[at:])
		}
	}
	return nil
}
