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
// calls send it) is sent to the next rank of a ring and compared there
// with that rank's: if every rank agrees with its left neighbour, all
// agree. The call does not wait for the comparison, which a goroutine of
// the group makes as the left neighbour's fingerprints arrive; a
// difference aborts the communicator with ErrMismatch naming the left
// neighbour and both calls (Links.Mismatch). Cost: 32 bytes per rank and
// call, sent in batches (a message of a count and up to fpBatch
// fingerprints): the call that fills a batch (fpBatch) sends it itself,
// a message copied into goccl's transport, and a timer sends a batch
// that waited fpFlush for its last calls (calls that stop, or come
// slowly). So a call is at most fpBatch-1 calls, or fpFlush, from its
// fingerprint's send. Waking a goroutine to send cost a thread's wake-up:
// for every call, an 8-byte allreduce over MPI took 3.4 us against 0.5
// for the MPI call alone; for every fourth call, 0.5 us a call still.
//
// The rank behind. A call that reaches its deadline asks every other
// member, over goccl's links, for the number of the last call it issued
// on the group (Group.Next counts them, as the flight recorder numbers
// calls), and names the member with the lowest, or one that does not
// answer within the grace. Every rank answers from a goroutine, whatever
// it is doing (asleep, computing, stuck in another call).

const (
	// fpBatch queued fingerprints are sent by the call that queued the
	// last of them: the most a batch holds.
	fpBatch = 4
	// fpFlush is the longest a fingerprint waits for its batch to fill.
	fpFlush = time.Millisecond
	// batchLen is a batch's message: a count, then room for fpBatch
	// fingerprints, one message of one size (a count and a body sent
	// apart woke the receiver twice).
	batchLen = 8 + fpBatch*wire.FPLen
)

// queue hands fp to the ring: it sends the batch once fpBatch have
// queued, and sets the flush timer for a batch's first.
func (g *Group) queue(fp *wire.Fingerprint) {
	g.fpMu.Lock()
	defer g.fpMu.Unlock()
	g.pending = append(g.pending, *fp)
	switch {
	case len(g.pending) >= fpBatch:
		g.sendLocked()
	case !g.flushSet:
		g.flushSet = true
		g.flush.Reset(fpFlush)
	}
}

// flushPending is the flush timer: it sends what waits. (Set for an
// earlier batch that went full, it goes off early: one small message.)
func (g *Group) flushPending() {
	g.fpMu.Lock()
	defer g.fpMu.Unlock()
	g.flushSet = false
	g.sendLocked()
}

// sendLocked sends the pending fingerprints to the next rank as one
// batch, and keeps them for the comparison with the previous rank's.
// g.fpMu is held: batches go in order.
func (g *Group) sendLocked() {
	batch := g.pending
	if len(batch) == 0 || g.ctx.Err() != nil {
		return
	}
	msg := make([]byte, batchLen) // a fresh one: the transport may still read the last
	binary.LittleEndian.PutUint64(msg, uint64(len(batch)))
	for i := range batch {
		copy(msg[8+i*wire.FPLen:], batch[i][:])
	}
	g.mu.Lock()
	g.mine = append(g.mine, batch...)
	g.mu.Unlock()
	select {
	case g.more <- struct{}{}:
	default:
	}
	g.pending = batch[:0]
	l := g.links
	g.links.EP.Isend(l.Ranks[(l.Rank+1)%len(l.Ranks)], wire.BackendFPTag(l.ID), msg)
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
		if k == 0 || k > fpBatch {
			l.Broken(left, fmt.Errorf("%w: backend %s: a batch of %d fingerprints (1 to %d)", transport.ErrProtocol, g.be.Name(), k, fpBatch))
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
