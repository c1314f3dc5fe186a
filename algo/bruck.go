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
// only to the ranks r-2^k, known before the first round. A caller that
// can reach only the peers whose blocks it holds (goccl's Init sharing
// addresses) uses BruckAllGatherAhead below.
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
	span := func(first, m int) int { return ringSpan(off, first, m) }
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

// Bruck allgather that pulls (BruckAllGatherAhead).
//
// A variant for callers whose ranks can only reach peers they know of,
// as goccl's Init under lazy links, where a rank knows its own address and
// its right-hand neighbour's (r+1) and must learn every other from the
// ranks themselves: a link to a peer is made by the rank that first sends
// to it, and the sender must know the peer's block. Rank r starts with
// blocks r and r+1 (mod n). In round k (d = 2^k) it sends an empty hello
// to rank r+d, whose block it already holds, waits for the hello of rank
// r-d, then sends rank r-d its blocks r+1 .. r+d over the link that hello
// came on, and receives blocks r+d+1 .. r+2d from rank r+d. So rank r
// holds r .. r+2d after round k, r+2d among them, which round k+1 sends
// its hello to; the last round sends only the blocks still missing (none
// when n-1 <= d, a round kept so that the rounds are a dissemination
// barrier for any n). Every message goes to a rank whose block the sender
// holds or over a link the receiver made. Four ranks, blocks A B C D:
//
//	start:          0 has A B,  1 has B C,  2 has C D,  3 has D A
//	round 0 (d=1):  hellos 0->1, 1->2, 2->3, 3->0
//	                0 <- 1 C,   1 <- 2 D,   2 <- 3 A,   3 <- 0 B
//	round 1 (d=2):  hellos 0->2, 1->3, 2->0, 3->1
//	                0 <- 2 D,   1 <- 3 A,   2 <- 0 B,   3 <- 1 C
//
// learned, when not nil, is called after each round with the m blocks
// from first on (mod n) that the round brought, before the next round's
// hello, so that the caller can make them reachable.
//
// Cost, with N the bytes of the whole gathered buffer:
//
//	T = 2⌈log2 n⌉·α + (n-2)/n·N·β

// BruckAllGatherAhead starts with the blocks of ranks Rank() and
// Rank()+1 (mod n) in place in buf and leaves every rank's block in every
// buf. With one rank it does nothing; with two, the rounds only
// synchronise.
func BruckAllGatherAhead(ctx context.Context, p Peers, buf []byte, counts []int, learned func(first, m int)) error {
	if err := CheckBlocks(p, buf, counts); err != nil {
		return fmt.Errorf("bruck allgather ahead: %w", err)
	}
	n, r := p.Size(), p.Rank()
	off := Offsets(counts, p.ElemSize())
	span := func(first, m int) int { return ringSpan(off, first, m) }
	for k, d := 0, 1; d < n; k, d = k+1, d*2 {
		m := max(0, min(d, n-1-d))
		up, down := (r+d)%n, (r-d+n)%n
		// The hello from down is posted before down's blocks can be,
		// should up and down be one rank: messages between a pair are
		// matched in order.
		hr := p.Irecv(down, nil)
		hs := p.Isend(up, nil)
		recv := make([]byte, span(up+1, m))
		rr := p.Irecv(up, recv)
		if err := hr.Wait(ctx); err != nil {
			return fmt.Errorf("bruck allgather ahead round %d: hello from rank %d: %w", k, down, err)
		}
		send := make([]byte, 0, span(r+1, m))
		for i := range m {
			q := (r + 1 + i) % n
			send = append(send, buf[off[q]:off[q+1]]...)
		}
		sr := p.Isend(down, send)
		if err := rr.Wait(ctx); err != nil {
			return fmt.Errorf("bruck allgather ahead round %d: recv from rank %d: %w", k, up, err)
		}
		if err := hs.Wait(ctx); err != nil {
			return fmt.Errorf("bruck allgather ahead round %d: hello to rank %d: %w", k, up, err)
		}
		if err := sr.Wait(ctx); err != nil {
			return fmt.Errorf("bruck allgather ahead round %d: send to rank %d: %w", k, down, err)
		}
		at := 0
		for i := range m {
			q := (up + 1 + i) % n
			at += copy(buf[off[q]:off[q+1]], recv[at:])
		}
		if learned != nil && m > 0 {
			learned((up+1)%n, m)
		}
	}
	return nil
}

// ringSpan is the bytes of the m blocks from rank first on, wrapping past
// the last rank, where block q spans off[q]..off[q+1].
func ringSpan(off []int, first, m int) int {
	n := len(off) - 1
	s := 0
	for i := range m {
		q := (first + i) % n
		s += off[q+1] - off[q]
	}
	return s
}
