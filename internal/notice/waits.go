package notice

import (
	"context"
	"time"

	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
)

// AskWaits is a stalled rank's question to the others: it sends every
// peer of ep the wait notice "this rank waits on world rank on" under
// tag, and listens up to grace for theirs, which the ranks stuck in the
// same call send as they time out too. It returns whom each rank that
// answered waits on, this rank's own answer included, by world rank.
func AskWaits(ep transport.Endpoint, tag transport.Tag, on int, grace time.Duration) map[int]int {
	me, n := ep.Rank(), ep.Size()
	var b [wire.WaitNoticeLen]byte
	wire.EncodeWait(b[:], on)
	bufs := make([][]byte, n)
	reqs := make([]transport.Request, n)
	for q := range n {
		if q == me {
			continue
		}
		ep.Isend(q, tag, b[:])
		bufs[q] = make([]byte, wire.WaitNoticeLen)
		reqs[q] = ep.Irecv(q, tag, bufs[q])
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, r := range reqs {
		if r != nil {
			r.Wait(ctx)
		}
	}
	waits := map[int]int{me: on}
	for q, r := range reqs {
		if r == nil {
			continue
		}
		select {
		case <-r.Done():
			if w := wire.ParseWait(bufs[q]); r.Err() == nil && w >= 0 && w < n {
				waits[q] = w
			}
		default:
		}
	}
	return waits
}

// Chain follows the waits from rank from: rank from waits on waits[from],
// which waits on ..., up to the rank that said nothing, the one that is
// stopped or busy elsewhere, which it returns with the chain of ranks. ok
// is false where the waits loop: no rank stands out.
func Chain(waits map[int]int, from int) (end int, chain []int, ok bool) {
	chain = []int{from}
	seen := map[int]bool{from: true}
	cur, waiting := waits[from]
	for waiting {
		if seen[cur] {
			return cur, chain, false
		}
		seen[cur] = true
		chain = append(chain, cur)
		cur, waiting = waits[cur]
		if !waiting {
			return chain[len(chain)-1], chain, true
		}
	}
	return from, chain, true
}
