package goccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/algo"
	iboard "github.com/goccl/goccl/internal/board"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
)

// The board: small collectives in shared memory. Where every rank of a
// group shares memory with every other, the transport offers a block that
// all of them map (transport.Board), and allreduces of up to boardMax
// bytes and barriers run on it instead of over messages. The slot
// protocol, its layout and the invariants its memory ordering rests on
// are internal/board's (its doc.go); this file is the communicator's
// side: which calls run on the board (useBoard), the board of a group
// (newBoard), a call run on it (board.run), the announcement of the calls
// that do not run on it (board.announce, from take), and the board's
// errors in goccl's words (boardError).
const (
	boardMax   = iboard.Max   // the largest payload that runs on the board
	boardLine  = iboard.Line  // call.mine's size
	boardPolls = iboard.Polls // reads of a slot before a wait, where the transports poll
	algoBoard  = algo.Algorithm("board")
)

// EnvBoard set to 0 (or off, false) keeps small collectives off the board,
// over messages, for comparison (goccl bench -transport mem with and
// without it).
const EnvBoard = "GOCCL_BOARD"

// board is one group's block, from one member's side: the protocol's
// Board, held in place (no pointer to follow on each call).
type board struct {
	iboard.Board
	off   bool // GOCCL_BOARD=0: no call runs on it, every call is announced
	polls int  // how many times Board reads a slot before it waits: boardPolls, or 1
}

// newBoard returns c's board, or nil where its transport offers none
// (transport.ErrNoBoard: the answer of every member). Any other failure to
// get it is an error: the other members may have the board, and their
// calls would wait on this rank's slot until the timeout.
func newBoard(c *Comm, bd transport.Boarder) (*board, error) {
	if bd == nil || c.Size() < 2 {
		return nil, nil
	}
	n := c.Size()
	tb, err := bd.Board(c.id, c.ranks, iboard.Size(n))
	if errors.Is(err, transport.ErrNoBoard) {
		return nil, nil // the collectives go over messages
	}
	if err != nil {
		return nil, fmt.Errorf("shared-memory board of group %#x: %w", c.id, err)
	}
	b := &board{polls: boardPolls}
	if c.opts.spin < 0 || c.opts.yield {
		b.polls = 1 // GOCCL_SPIN=0, or more ranks than CPUs: no polling
	}
	if err := b.Init(tb, n, c.rank, b.polls); err != nil {
		tb.Close()
		return nil, fmt.Errorf("shared-memory board of group %#x: %w", c.id, err)
	}
	// With the board off the block is still made, and every call is
	// announced on it: a rank whose GOCCL_BOARD says otherwise then
	// fails at once, naming this one, instead of waiting to the timeout.
	b.off = ipcDisabled(c.opts.getenv(EnvBoard))
	return b, nil
}

// announce says that this rank's call seq, with fingerprint fp, does not
// run on the board.
func (b *board) announce(seq uint64, fp *fingerprint) {
	b.Announce(seq, (*[fpLen]byte)(fp))
}

// useBoard reports whether a call of bytes on host memory runs on c's
// board: c has one, the call is small, and neither the call nor the
// configuration names an algorithm (free). Every rank answers alike for
// the same call, and where calls differ the fingerprint or the
// announcement says so.
func (c *Comm) useBoard(bytes int, free bool) bool {
	return c.board != nil && !c.board.off && bytes <= boardMax && free && c.opts.algos == nil
}

// newBoardCall makes a call that runs on c's board, from the pool (a
// synchronous caller returns it with do).
func (c *Comm) newBoardCall(name string, dt reduceop.DType, bytes int) *call {
	k := c.newPooledCall(name, dt, bytes, algoBoard)
	k.onBoard = true
	return k
}

// boardAllReduce makes the call of an allreduce on the board.
func (c *Comm) boardAllReduce(name string, v *view, op reduceop.Op) *call {
	k := c.newBoardCall(name, v.dt, v.bytes()).agree(v.n, op, -1)
	k.silent = false // the board compares fingerprints even with no element
	k.boardBuf, k.boardOp = v.b, op
	c.peers(k, v.dt, reducer(reduceop.Host{}, v.dt, op))
	return k
}

// run runs k, a call on the board: an allreduce of k.boardBuf with
// k.boardOp, or a barrier where k has no reducer.
//
// The call's clock: a call made in place has read none when it gets here
// (exec, callCtx.prepare). The board stamps its start for the flight
// recorder (k.started, internal/clock: 12 ns where time.Since takes 33)
// once it has published, and calls k.waits, which starts its context,
// only before it waits: the timeout then counts from the wait, after at
// most iboard.Polls reads.
func (b *board) run(ctx context.Context, k *call) error {
	p := k.p
	// Field by field, not as a composite literal: the literal was built
	// in a temporary in 8-byte stores and copied into bc in 16-byte
	// loads, which wait for those stores to reach the cache (no
	// store-to-load forwarding across the widths): 25 ns a call.
	var bc iboard.Call
	bc.Seq, bc.Prev = uint64(p.tag)&(tagP2P-1), k.prev
	bc.FP, bc.Check = (*[fpLen]byte)(&p.fp), p.check
	bc.Started, bc.Hooks = &k.started, (*boardHooks)(k)
	if p.reduce == nil {
		if err := b.Barrier(ctx, &bc); err != nil {
			return k.boardError(err)
		}
		return nil
	}
	if err := b.AllReduce(ctx, &bc, k.boardBuf, k.mine[:], p.reduce); err != nil {
		return k.boardError(err)
	}
	if k.boardOp == reduceop.Avg {
		return (reduceop.Host{}).Scale(k.dt, k.boardBuf, b.Members())
	}
	return nil
}

// boardHooks is a call as the board's waits see it.
type boardHooks call

// Waiting starts the call's context and tells the flight recorder when
// the call started and whom it waits on.
func (h *boardHooks) Waiting(q int) {
	k := (*call)(h)
	k.waits()
	if q >= 0 {
		k.p.waitOn.Store(int32(q + 1))
	}
}

// Aborted ends the board's waits once the communicator is aborted.
func (h *boardHooks) Aborted() bool { return h.c.shared.aborted.Load() != nil }

// boardError turns an error of the board into k's, as the same failure
// over messages reads: a fingerprint that differs, a call announced off
// the board, a slot of another length, a wait that ended (a lost peer, an
// abort, the timeout). Any other error (the reduction's) is returned as
// it is.
func (k *call) boardError(err error) error {
	p := k.p
	c := p.c
	switch e := err.(type) {
	case *iboard.MismatchError:
		mine, theirs := fingerprint(e.Mine), fingerprint(e.Theirs)
		var why error = &mismatchError{mine: mine, theirs: theirs, peer: e.Member}
		if e.Announced && theirs == mine {
			// The same call, off the board there: the ranks'
			// GOCCL_BOARD or forced algorithms differ.
			why = fmt.Errorf("%w: %v runs on the shared board here and over messages on peer %d (GOCCL_BOARD or the forced algorithm differs between the ranks)", ErrMismatch, mine, e.Member)
		}
		return &Error{Op: p.op, Rank: c.rank, Peer: e.Member, Dir: "<-", Err: why}
	case *iboard.LengthError:
		r := &request{p: p, peer: e.Member, dir: "<-"}
		return r.lengthMismatch(e.Got, e.Want)
	case *iboard.WaitError:
		r := &request{p: p, peer: e.Member, dir: "<-"}
		if e.Member < 0 { // the acks of several, none of them lost
			if r.peer = c.lostPeer(); r.peer < 0 {
				return &Error{Op: p.op, Rank: c.rank, Peer: -1, Err: classify(e.Err)}
			}
		}
		return r.wrap(e.Err)
	}
	return err
}

func (b *board) close() {
	if b != nil {
		b.Close()
	}
}
