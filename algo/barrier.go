// Dissemination barrier.
//
// In round k (k = 0..⌈log2 n⌉-1) rank r sends an empty message to rank
// r+2^k and waits for one from rank r-2^k (mod n). After round k every rank
// has heard, directly or through others, from the 2^(k+1) ranks before it,
// so after ⌈log2 n⌉ rounds it has heard from everyone. Four ranks:
//
//	round 0:  0 -> 1,  1 -> 2,  2 -> 3,  3 -> 0
//	round 1:  0 -> 2,  1 -> 3,  2 -> 0,  3 -> 1
//
// Unlike a gather-then-release barrier it has no root and no hot spot; every
// rank sends and receives one message per round.
//
// Cost:
//
//	T = ⌈log2 n⌉·α

package algo

import (
	"context"
	"fmt"
)

var _ BarrierFunc = DisseminationBarrier

// DisseminationBarrier returns once every rank of the group has entered it.
func DisseminationBarrier(ctx context.Context, p Peers) error {
	n, r := p.Size(), p.Rank()
	var token [0]byte
	for k, d := 0, 1; d < n; k, d = k+1, d*2 {
		to, from := (r+d)%n, (r-d+n)%n
		rr := p.Irecv(from, token[:])
		sr := p.Isend(to, token[:])
		if err := rr.Wait(ctx); err != nil {
			return fmt.Errorf("dissemination barrier round %d: recv from rank %d: %w", k, from, err)
		}
		if err := sr.Wait(ctx); err != nil {
			return fmt.Errorf("dissemination barrier round %d: send to rank %d: %w", k, to, err)
		}
	}
	return nil
}
