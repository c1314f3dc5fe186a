// Pairwise all-to-all.
//
// Every rank has a different block for every other rank. In step k
// (k = 1..n-1) rank r sends its block for rank r+k and receives, from rank
// r-k, that rank's block for r (indices mod n). Each step is one full-duplex
// exchange, and every pair of ranks meets exactly once. Four ranks (block
// "ij" is rank i's block for rank j; "ii" is copied locally first):
//
//	step 1:  0 -01-> 1 -12-> 2 -23-> 3 -30-> 0
//	step 2:  0 -02-> 2 -20-> 0     1 -13-> 3 -31-> 1
//	step 3:  0 -03-> 3 -32-> 2 -21-> 1 -10-> 0
//
// Cost, with N the bytes a rank sends in all (its own block excluded):
//
//	T = (n-1)·α + N·β
//
// which for equal blocks of the whole send buffer of S bytes is
// (n-1)·α + (n-1)/n·S·β. Blocks of zero length are not sent.

package algo

import (
	"context"
	"fmt"
)

var _ AllToAllFunc = PairwiseAllToAll

// PairwiseAllToAll sends block j of send (sendCounts[j] elements) to rank j
// and receives rank j's block for this rank into block j of recv
// (recvCounts[j] elements), by pairwise exchange. sendCounts[j] on this rank
// must equal recvCounts[i] on rank j, where i is this rank.
func PairwiseAllToAll(ctx context.Context, p Peers, send []byte, sendCounts []int, recv []byte, recvCounts []int) error {
	if err := CheckBlocks(p, send, sendCounts); err != nil {
		return fmt.Errorf("pairwise alltoall: send: %w", err)
	}
	if err := CheckBlocks(p, recv, recvCounts); err != nil {
		return fmt.Errorf("pairwise alltoall: recv: %w", err)
	}
	n, r, es := p.Size(), p.Rank(), p.ElemSize()
	so, ro := Offsets(sendCounts, es), Offsets(recvCounts, es)
	if sendCounts[r] != recvCounts[r] {
		return fmt.Errorf("pairwise alltoall: rank %d sends itself %d elements but expects %d", r, sendCounts[r], recvCounts[r])
	}
	if err := Copy(p, recv[ro[r]:ro[r+1]], send[so[r]:so[r+1]]); err != nil {
		return fmt.Errorf("pairwise alltoall: local block: %w", err)
	}
	for k := 1; k < n; k++ {
		to, from := (r+k)%n, (r-k+n)%n
		if err := Exchange(ctx, p, to, send[so[to]:so[to+1]], from, recv[ro[from]:ro[from+1]]); err != nil {
			return fmt.Errorf("pairwise alltoall step %d: %w", k, err)
		}
	}
	return nil
}
