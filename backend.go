package goccl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	_ "github.com/goccl/goccl/backend/mpi"  // registers MPI when built with -tags mpi
	_ "github.com/goccl/goccl/backend/nccl" // registers NCCL when built with -tags cuda
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/reduceop"
)

// WithBackend selects the library calls run on (GOCCL_BACKEND, the file's
// "backend"): "goccl"; "auto" (default): goccl, and NCCL for device buffers
// where it loads on every rank (-tags cuda); "nccl": device buffers on
// NCCL; "mpi": MPI (-tags mpi, under mpirun). Groups inherit it.
func WithBackend(name string) Option { return func(o *options) { o.backend = name } }

// openBackend opens the selected backend beside the world's goccl links.
func (c *Comm) openBackend() error {
	be, err := backend.OpenJob(context.Background(), backend.Kind(c.opts.backend), c.shared.ep, func(why string) {
		debugLog(c.opts.debugLogger(c.rank), slog.LevelInfo, "goccl backend", "backend", why)
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if c.be = backend.NewWorld(be, c.backendLinks()); c.takes(backend.Host) { // its calls never run on the board
		c.shared.boarder = nil
	}
	return nil
}

// backendLinks is what c's backend group needs of goccl's links.
func (c *Comm) backendLinks() backend.Links {
	return backend.Links{EP: c.shared.ep, ID: c.id, Rank: c.rank, Ranks: c.ranks, Check: !c.opts.noCheck,
		Mismatch: func(peer int, mine, theirs *wire.Fingerprint) {
			c.abort(&Error{Op: mine.Op(), Rank: c.rank, Peer: peer, Err: &mismatchError{mine: *mine, theirs: *theirs, peer: peer}})
		},
		Broken: func(peer int, err error) { c.abort(&Error{Op: "backend check", Rank: c.rank, Peer: peer, Err: err}) }}
}

// delegate hands k's data movement to c's backend where it takes bc: k
// keeps its checks, order, fingerprint, deadline, flight record and comms
// log (exec) and runs bc instead of its algorithm (body). MPI refuses
// device memory, NCCL leaves host memory to goccl; bc is copied only then.
func (c *Comm) delegate(k *call, dev bool, bc backend.Call) *call {
	if c.be == nil || !dev && !c.takes(backend.Host) {
		return k
	}
	if dev && !c.takes(backend.Device) {
		k.err = invalid(k.op, c.rank, "backend %s takes host buffers only", c.be.Name())
		return k
	}
	if k.bc = c.be.Take(&k.ownB, bc); k.bc != nil {
		k.algo = c.be.Name()
	}
	return k
}

// p2pBackend makes a Send's or Recv's call on c's backend, posted now (a
// tag's messages match in the order posted), or nil: goccl's own path.
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
	var fp *wire.Fingerprint // the call's, for the backend's ring of them
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
// memory runs on, "goccl" or the backend's ("mpi"), as goccl bench shows.
func (c *Comm) BackendFor(coll algo.Collective, bytes int) string { return c.BackendOn(coll, nil, 0) }

// BackendOn names the library a collective on buf, reduced by op where it
// reduces, runs on: "goccl", or the backend's where it takes the call
// ("nccl" for a DeviceBuffer under NCCL, not for BXor). buf is the
// receive buffer of a collective of two; nil: host memory (BackendFor).
func (c *Comm) BackendOn(coll algo.Collective, buf any, op reduceop.Op) string {
	var v view
	_ = v.of(buf) // not a buffer: no buffer, as nil
	return c.be.For(backend.Call{Coll: backend.ParseColl(coll.String()), Send: v.b, Recv: v.b, SendDev: v.dev, RecvDev: v.dev, DType: v.dt, Op: op})
}

// takes reports whether c has a backend that takes memory m.
func (c *Comm) takes(m backend.Memory) bool { return c.be != nil && c.be.Memory()&m != 0 }
