package onebit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/goccl/goccl/reduceop"
)

// Comm is what the compressed allreduce and Adam need from a communicator.
// *goccl.Comm satisfies it. send, recv and buf are typed slices ([]uint8,
// []float32, ...), the same type on every rank.
//
//   - AllToAll splits send and recv into Size() equal blocks: block j of send
//     goes to rank j, block j of recv comes from rank j.
//   - AllGather fills recv, which has Size()*len(send) elements: block j is
//     rank j's send.
//   - AllReduce reduces buf in place with op over all ranks.
//
// Each call blocks until this rank's part is done or ctx ends, and must not
// keep send, recv or buf after it returns.
type Comm interface {
	Rank() int
	Size() int
	AllToAll(ctx context.Context, send, recv any) error
	AllGather(ctx context.Context, send, recv any) error
	AllReduce(ctx context.Context, buf any, op reduceop.Op) error
}

// CompressedAllReduce replaces buf, on every rank, by the 1-bit compressed
// average of the bufs of all ranks of c, with error feedback kept in st; it
// computes what DeepSpeed's NcclBackend.compressed_allreduce computes (see
// the package doc for the five steps). Every rank passes a buffer of
// st.Len() elements; all ranks end with the same buf.
//
// Inputs are checked before anything is sent: st must be made for
// len(buf) elements and for c.Size() ranks, and hold no other rank's errors;
// a refused call leaves st as it was. After a successful call st also holds
// the scales and signs of the step (State.WorkerScale, WorkerScales,
// ServerScale, ServerScales, WorkerSigns, ServerSigns). If a communication
// step fails, the error names the step and the rank; buf is then
// unspecified, and the errors in st may be half updated (call st.Reset on
// every rank to start the error feedback afresh).
func CompressedAllReduce(ctx context.Context, c Comm, buf []float32, st *State) error {
	if err := check(c, buf, st); err != nil {
		return err
	}
	st.rank, st.last = c.Rank(), false
	if st.padded == 0 {
		return nil // nothing to compress: no scales, no last step
	}
	k := st.k()
	p, rank := st.world, c.Rank()
	chunk := st.padded / p
	cb := chunk / 8 // packed bytes per chunk

	// Step 2, worker: compensate, scale, pack, new worker error.
	ss := k.CompensateNorm(st.workerErr, buf)
	st.scale[0] = rms(ss, st.padded)
	k.PackUpdate(st.sendBits, st.workerErr, st.scale[0])

	// Step 3, phase 1: chunk j of the signs to rank j; every scale to all.
	if err := c.AllToAll(ctx, st.sendBits, st.recvBits); err != nil {
		return opErr(rank, "phase 1 all-to-all of signs", err)
	}
	if err := c.AllGather(ctx, st.scale, st.scales); err != nil {
		return opErr(rank, "phase 1 all-gather of scales", err)
	}

	// Step 4, server: average the workers' chunks, compensate, compress.
	inv := float32(1 / float64(p))
	clear(st.serverAcc)
	for j := range p {
		k.AccumulateSigns(st.serverAcc, st.recvBits[j*cb:(j+1)*cb], st.scales[j]*inv)
	}
	ss = k.CompensateNorm(st.serverErr, st.serverAcc)
	st.scale[0] = rms(ss, chunk)
	k.PackUpdate(st.serverBits, st.serverErr, st.scale[0])

	// Step 5, phase 2: every server chunk and scale to all; decompress.
	if err := c.AllGather(ctx, st.serverBits, st.gathered); err != nil {
		return opErr(rank, "phase 2 all-gather of signs", err)
	}
	if err := c.AllGather(ctx, st.scale, st.sscales); err != nil {
		return opErr(rank, "phase 2 all-gather of scales", err)
	}
	for j := range p {
		lo, hi := min(j*chunk, st.n), min((j+1)*chunk, st.n)
		k.Decompress(buf[lo:hi], st.gathered[j*cb:(j+1)*cb], st.sscales[j])
	}
	st.last = true
	return nil
}

// rms returns float32(sqrt(ss)) / float32(sqrt(n)), the scale of n values
// whose sum of squares is ss, rounded as DeepSpeed rounds it: the norm is a
// float32 tensor divided in float32.
func rms(ss float64, n int) float32 {
	return float32(math.Sqrt(ss)) / float32(math.Sqrt(float64(n)))
}

func check(c Comm, buf []float32, st *State) error {
	switch {
	case c == nil:
		return errors.New("onebit: compressed allreduce: nil Comm")
	case st == nil:
		return errors.New("onebit: compressed allreduce: nil State")
	case len(buf) != st.n:
		return fmt.Errorf("%w: compressed allreduce rank %d: buffer has %d elements, State is for %d",
			ErrSize, c.Rank(), len(buf), st.n)
	case c.Size() != st.world:
		return fmt.Errorf("%w: compressed allreduce rank %d: communicator has %d ranks, State is for %d",
			ErrSize, c.Rank(), c.Size(), st.world)
	case c.Rank() < 0 || c.Rank() >= c.Size():
		return fmt.Errorf("onebit: compressed allreduce: rank %d out of range [0,%d)", c.Rank(), c.Size())
	case st.rank >= 0 && c.Rank() != st.rank:
		return fmt.Errorf("%w: compressed allreduce rank %d: State holds the errors of rank %d (Reset it first)",
			ErrSize, c.Rank(), st.rank)
	}
	return nil
}

func opErr(rank int, step string, err error) error {
	return fmt.Errorf("onebit: compressed allreduce rank %d: %s: %w", rank, step, err)
}
