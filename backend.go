package goccl

import (
	"context"
	"errors"
	"fmt"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	_ "github.com/goccl/goccl/backend/mpi" // registers MPI when built with -tags mpi
	"github.com/goccl/goccl/internal/wire"
)

// WithBackend selects the library a communicator's calls run on
// (GOCCL_BACKEND, the file's "backend"): "auto" (the default) and "goccl"
// run goccl's own algorithms (auto will run device buffers on NCCL once
// that backend exists), "mpi" the MPI backend (backend/mpi, built with
// -tags mpi, under mpirun), "nccl" is refused: not built yet. Every rank
// must select the same; groups inherit it.
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// openBackend opens the selected backend for a new world communicator,
// beside the goccl links it keeps.
func (c *Comm) openBackend() error {
	be, err := backend.Open(backend.Kind(c.opts.backend), c.rank, c.Size())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if be != nil {
		c.be, c.shared.boarder = backend.NewWorld(be, c.backendLinks()), nil
	}
	return nil
}

// backendLinks is what c's backend group needs of goccl's links.
func (c *Comm) backendLinks() backend.Links {
	return backend.Links{EP: c.shared.ep, ID: c.id, Rank: c.rank, Ranks: c.ranks, Check: !c.opts.noCheck,
		Mismatch: func(peer int, mine, theirs *wire.Fingerprint) {
			c.abort(&Error{Op: mine.Op(), Rank: c.rank, Peer: peer, Err: &mismatchError{mine: *mine, theirs: *theirs, peer: peer}})
		}}
}

// delegate hands k's data movement to c's backend, if it has one that
// takes bc: k keeps its checks, order, fingerprint, deadline, flight
// record and comms log (exec), and runs bc there instead of its
// algorithm (body). A device buffer is refused.
//
// bc is copied to the heap only when there is a backend: without one, a
// call allocates nothing more for it.
func (c *Comm) delegate(k *call, dev bool, bc backend.Call) *call {
	if c.be == nil {
		return k
	}
	if dev {
		k.err = invalid(k.op, c.rank, "backend %s takes host buffers only", c.be.Name())
		return k
	}
	taken := new(backend.Call)
	*taken = bc
	if c.be.Takes(taken) {
		k.bc, k.algo = taken, c.be.Name()
	}
	return k
}

// p2pBackend makes a Send's or Recv's call on c's backend, posted now
// (messages of one tag match in the order they are posted), or returns
// nil for goccl's own path.
func (c *Comm) p2pBackend(name string, v view, bc backend.Call) *call {
	if c.be == nil {
		return nil
	}
	k := c.delegate(c.newCall(name, v.dt, v.bytes(), ""), v.dev != nil, bc)
	if k.bc != nil {
		k.err = c.be.Post(k.bc)
	} else if k.err == nil {
		return nil
	}
	return k
}

// runBackend is body for a delegated call.
func (c *Comm) runBackend(ctx context.Context, k *call) error {
	var fp *wire.Fingerprint
	if k.p != nil && k.p.check {
		fp = &k.p.fp
	}
	err := c.be.Run(ctx, k.bc, fp, c.shared.closed)
	if pe := (*backend.PeerError)(nil); errors.As(err, &pe) {
		return &Error{Op: k.op, Rank: c.rank, Peer: pe.Peer, Err: classify(pe.Err)}
	}
	return err
}

// BackendFor names the library a collective of bytes per rank on host
// memory runs on: "goccl" (its own algorithms: AlgorithmFor says which)
// or the backend's name ("mpi"). goccl bench shows it.
func (c *Comm) BackendFor(coll algo.Collective, bytes int) string {
	if c.be == nil {
		return string(backend.Goccl)
	}
	return c.be.Name()
}
