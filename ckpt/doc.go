// Package ckpt implements erasure-coded checkpoints of per-rank state held
// in the memory of the other ranks, with no disk: after up to m ranks lose
// their memory, the survivors and the replacement ranks rebuild every
// rank's state exactly.
//
// Every rank makes a Store over its communicator and calls Save with its
// state (any bytes: weights, optimizer moments, 1-bit error buffers; the
// length may differ per rank, and may be 0). Save cuts the state into k
// data shards of ceil(len/k) bytes (the last one zero padded), computes m
// parity shards with github.com/klauspost/reedsolomon, and sends the k+m
// shards to k+m distinct other ranks. When ranks fail, their places are
// taken by fresh ranks with a new, empty Store, and every rank calls
// Restore: each surviving holder sends each owner its shard, and each
// owner rebuilds its state from any k of them.
//
// A job that does not want to hold a Store calls the package-level
// Save(ctx, c, state) and Restore(ctx, c), which keep one Store per
// communicator value c, made on first use with the default Config; a rank
// with none kept restores as a replacement. The Store stays in memory until
// Forget(c) drops it, and Rebind(c, w) moves it to another communicator.
//
// With processes over TCP (goccl.Init), a lost rank aborts the
// communicator. The survivors may go on without the lost ranks for a while
// (Comm.Shrink); to restore, replacement processes start with the lost
// ranks' RANK and GOCCL_REJOIN=1, the survivors call Comm.Readmit, which
// returns a full-size communicator in which every survivor keeps its rank,
// and move their Store to it with Rebind:
//
//	w, err := c.Readmit(ctx) // c: the failed (or shrunk) communicator
//	err = s.Rebind(w)        // survivors; a replacement calls New(w, cfg)
//	state, err := s.Restore(ctx)
//
// or, with the package-level functions, ckpt.Rebind(saved, w) on the
// survivors, where saved is the communicator they called Save on (not one
// from Shrink), and ckpt.Restore(ctx, w) on every rank.
//
// # Placement
//
// Shard j (0 <= j < k+m; data shards first) of rank r's state lives on rank
// (r+1+j) mod n. For n = 6, k = 3, m = 2 (D data, P parity):
//
//	holder:   0    1    2    3    4    5
//	owner 0:  -    D0   D1   D2   P0   P1
//	owner 1:  P1   -    D0   D1   D2   P0
//	owner 2:  P0   P1   -    D0   D1   D2
//	owner 3:  D2   P0   P1   -    D0   D1
//	owner 4:  D1   D2   P0   P1   -    D0
//	owner 5:  D0   D1   D2   P0   P1   -
//
// So an owner never holds its own shards, and each rank holds one shard of
// each of the k+m ranks before it. If m ranks fail, a failed owner has lost
// at most m-1 of its shards and a surviving owner at most m, so every owner
// keeps at least k. This needs k+m <= n-1; New refuses anything else.
//
// # Memory
//
// With states of L bytes, each rank holds k+m shards of L/k bytes for the
// others: (1 + m/k)·L, an overhead of m/k over one copy of the checkpoint
// (plus n·(48+32(k+m)) bytes of metadata). Replication that survives the
// same m failures keeps m+1 copies of the checkpoint per rank: the owner's
// snapshot (its live state moves on after Save) and m replicas elsewhere,
// (m+1)·L. For k = 3, m = 2 that is 1.67·L against 3·L; for k = 4, m = 1,
// 1.25·L against 2·L. Save sends (1 + m/k)·L bytes per rank against m·L.
//
// # Integrity and generations
//
// Save gathers every rank's metadata to every rank: the state's length and
// SHA-256 and the SHA-256 of each shard. Restore drops shards whose
// checksum does not match, as if they were lost, rebuilds from the others
// when at least k remain, and checks the rebuilt state's checksum.
//
// Each Save makes a new generation. Its shards replace the previous
// generation's only after every rank has reported (in a final all-gather)
// that it received all of its shards, so a Save that fails part way leaves
// the last good generation in place. A rank whose commit was cut short
// keeps the new generation aside, and Restore picks the newest generation
// that every survivor holds. Restore returns every rank's state, survivors
// included, as of that generation, so that the job resumes from one
// consistent step, then saves it again so that the replacements hold
// shards once more.
//
// A Store is one rank's; its methods, like the package-level Save and
// Restore, are collective and blocking, take a context, and return errors
// that name the operation and rank and wrap ErrConfig, ErrNoCheckpoint,
// ErrTooManyLost or ErrCorrupt, or the communicator's error.
package ckpt
