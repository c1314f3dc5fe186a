package backend

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
)

// The guard: what goccl checks beside a backend's calls, over its own
// links, since the backend's library checks neither.
//
// Fingerprints. Every backend call's fingerprint (the root's, as its own
// calls send it) goes to a goroutine of the group, which sends it to the
// next rank of a ring and compares it with the previous rank's: if every
// rank agrees with its left neighbour, all agree. The call does not wait
// for the comparison; at most fpLag calls may be issued ahead of it, so
// a difference is found a few calls behind at most, and aborts the
// communicator with ErrMismatch naming the left neighbour and both calls
// (Links.Mismatch). Cost: 32 bytes per rank and call, sent in batches (a
// message of a count and up to fpLag fingerprints), off the call's path.
// A call only queues its fingerprint; the sending goroutine is
// woken once fpBatch have queued, or fpFlush after the first of a batch
// (calls that stop, or come slowly): waking it for every call cost a
// thread's wake-up a call (futexes, and a core the polling ranks need:
// an 8-byte allreduce over MPI took 3.4 us against 0.5 for the MPI call
// alone).
//
// The rank behind. A call that reaches its deadline asks every other
// member, over goccl's links, for the number of the last call it issued
// on the group (Group.Next counts them, as the flight recorder numbers
// calls), and names the member with the lowest, or one that does not
// answer within the grace. Every rank answers from a goroutine, whatever
// it is doing (asleep, computing, stuck in another call).

const (
	// fpLag is how many calls a group's fingerprint ring may fall behind.
	fpLag = 8
	// fpBatch queued fingerprints wake the goroutine that sends them.
	fpBatch = fpLag / 2
	// fpFlush is the longest a fingerprint waits for its batch to fill.
	fpFlush = time.Millisecond
	// batchLen is a batch's message: a count, then room for fpLag
	// fingerprints, one message of one size (a count and a body sent
	// apart woke the receiver twice).
	batchLen = 8 + fpLag*wire.FPLen
)

// queue hands fp to the ring, waiting while fpLag are queued unsent.
func (g *Group) queue(fp *wire.Fingerprint, stop <-chan struct{}) error {
	for {
		g.fpMu.Lock()
		n := len(g.pending)
		if n < fpLag {
			g.pending = append(g.pending, *fp)
			g.fpMu.Unlock()
			switch {
			case n+1 >= fpBatch:
				g.wake()
			case n == 0:
				g.flush.Reset(fpFlush)
			}
			return nil
		}
		g.fpMu.Unlock()
		g.wake()
		select {
		case <-g.taken:
		case <-stop:
			return ErrStopped
		case <-g.ctx.Done():
			return ErrStopped
		}
	}
}

// wake tells the ring's sender that fingerprints are waiting.
func (g *Group) wake() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// ring sends this rank's fingerprints to the next rank, in batches (what
// queued since the last batch went: a count, then the fingerprints),
// and compares the previous rank's with them, in order. Its goroutines
// park, never spin: the call's own wait polls the library, and a spinning
// guard would take its CPU.
func (g *Group) ring() {
	l := g.links
	n := len(l.Ranks)
	right := l.Ranks[(l.Rank+1)%n]
	tag := wire.BackendFPTag(l.ID)
	go g.compare()
	defer g.flush.Stop()
	for {
		select {
		case <-g.kick:
		case <-g.ctx.Done():
			return
		}
		g.fpMu.Lock()
		batch := g.pending
		g.pending = make([]wire.Fingerprint, 0, fpLag)
		g.fpMu.Unlock()
		if len(batch) == 0 {
			continue
		}
		select {
		case g.taken <- struct{}{}:
		default:
		}
		g.mu.Lock()
		g.mine = append(g.mine, batch...)
		g.mu.Unlock()
		select {
		case g.more <- struct{}{}:
		default:
		}
		msg := make([]byte, batchLen) // a fresh one: the send may still read the last
		binary.LittleEndian.PutUint64(msg, uint64(len(batch)))
		for i := range batch {
			copy(msg[8+i*wire.FPLen:], batch[i][:])
		}
		l.EP.Isend(right, tag, msg)
	}
}

// compare receives the previous rank's batches and compares each of its
// fingerprints with this rank's call of the same place.
func (g *Group) compare() {
	l := g.links
	n := len(l.Ranks)
	left := (l.Rank + n - 1) % n
	tag := wire.BackendFPTag(l.ID)
	wait := func(r transport.Request) bool {
		select {
		case <-r.Done():
			return r.Err() == nil // else the endpoint closed: an abort, Close
		case <-g.ctx.Done():
			return false
		}
	}
	var msg [batchLen]byte
	for {
		if !wait(l.EP.Irecv(l.Ranks[left], tag, msg[:])) {
			return
		}
		k := binary.LittleEndian.Uint64(msg[:])
		if k == 0 || k > fpLag {
			l.Broken(left, fmt.Errorf("%w: backend %s: a batch of %d fingerprints (1 to %d)", transport.ErrProtocol, g.be.Name(), k, fpLag))
			return
		}
		body := msg[8 : 8+k*wire.FPLen]
		for len(body) > 0 {
			var theirs wire.Fingerprint
			copy(theirs[:], body)
			body = body[wire.FPLen:]
			g.mu.Lock()
			for len(g.mine) == 0 {
				g.mu.Unlock()
				select {
				case <-g.more:
				case <-g.ctx.Done():
					return
				}
				g.mu.Lock()
			}
			mine := g.mine[0]
			g.mine = g.mine[1:]
			g.mu.Unlock()
			if theirs != mine {
				err := fmt.Errorf("calls differ: group rank %d made %v where this rank made %v", left, theirs, mine)
				g.differ.Store(&err) // for a blocking call's watchdog, which cannot return the root's error
				l.Mismatch(left, &mine, &theirs)
				return
			}
		}
	}
}

// behindLen: a question or an answer: kind, group id, last issued call.
const behindLen = 24

const (
	kindAsk    = 1
	kindAnswer = 2
)

// answer starts the goroutines that answer the other ranks' questions.
// One receive is posted per peer of the world (a cost of O(N) receives a
// rank, only in jobs that run a backend).
func (w *world) answer() {
	me, n := w.ep.Rank(), w.ep.Size()
	for q := range n {
		if q == me {
			continue
		}
		go func() {
			var b [behindLen]byte
			for {
				r := w.ep.Irecv(q, wire.BackendBehindTag, b[:])
				if r.Wait(w.ctx) != nil {
					return
				}
				kind, group, last := binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
				switch kind {
				case kindAsk:
					mine := ^uint64(0)
					if v, ok := w.groups.Load(group); ok {
						mine = v.(*Group).issued.Load()
					}
					var a [behindLen]byte
					putBehind(a[:], kindAnswer, group, mine)
					w.ep.Isend(q, wire.BackendBehindTag, a[:])
				case kindAnswer:
					w.mu.Lock()
					w.answers[answerKey{group, q}] = last
					w.mu.Unlock()
				}
			}
		}()
	}
}

func putBehind(b []byte, kind, group, last uint64) {
	binary.LittleEndian.PutUint64(b, kind)
	binary.LittleEndian.PutUint64(b[8:], group)
	binary.LittleEndian.PutUint64(b[16:], last)
}

// Grace is how long a rank whose call reached its deadline waits for the
// others' answers.
var Grace = 200 * time.Millisecond

// behind asks the group's members for their last issued call and returns
// the group rank behind (-1: none stands out) and why, in words.
func (g *Group) behind() (int, string) {
	l, w := g.links, g.w
	mine := g.issued.Load()
	var q [behindLen]byte
	putBehind(q[:], kindAsk, l.ID, mine)
	w.mu.Lock()
	for _, r := range l.Ranks {
		delete(w.answers, answerKey{l.ID, r})
	}
	w.mu.Unlock()
	for i, r := range l.Ranks {
		if i != l.Rank {
			w.ep.Isend(r, wire.BackendBehindTag, q[:])
		}
	}
	got := map[int]uint64{}
	deadline := time.Now().Add(Grace)
	for len(got) < len(l.Ranks)-1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		w.mu.Lock()
		for i, r := range l.Ranks {
			if v, ok := w.answers[answerKey{l.ID, r}]; ok && i != l.Rank {
				got[i] = v
			}
		}
		w.mu.Unlock()
	}
	return blame(l.Rank, len(l.Ranks), mine, got)
}

// blame names the rank behind: the member whose last issued call is the
// lowest below this rank's (the lowest rank of those), else the first
// that did not answer; -1 when every member has issued as many calls as
// this rank (the library itself is stuck).
func blame(me, n int, mine uint64, got map[int]uint64) (int, string) {
	peer, low := -1, mine
	for i := range n {
		if v, ok := got[i]; ok && i != me && v < low {
			peer, low = i, v
		}
	}
	if peer >= 0 {
		return peer, fmt.Sprintf("rank %d is behind: its last call is number %d, this rank's is %d", peer, low, mine)
	}
	var silent []int
	for i := range n {
		if _, ok := got[i]; !ok && i != me {
			silent = append(silent, i)
		}
	}
	if len(silent) > 0 {
		slices.Sort(silent)
		return silent[0], fmt.Sprintf("rank %d did not say which call it is at (no answer from ranks %v); this rank is at call %d", silent[0], silent, mine)
	}
	return -1, fmt.Sprintf("every rank has issued call %d: the backend itself is stuck", mine)
}
