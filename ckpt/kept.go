package ckpt

import (
	"context"
	"fmt"
	"reflect"
	"sync"
)

// kept holds the Stores of the package-level Save and Restore, one per
// communicator value. The lock guards the map only: a Store is used by
// its own rank's calls, which do not overlap.
var kept = struct {
	sync.Mutex
	m map[Comm]*Store
}{m: make(map[Comm]*Store)}

// Save stores this rank's state, erasure coded, in the memory of the other
// ranks of c, as (*Store).Save does, in a Store that the package keeps for
// c: the first Save on c makes it, with the default Config. It is
// collective: every rank of c calls it with its own state.
//
// c is the key under which the Store is kept: pass the same communicator
// value to later calls and to Restore, each rank its own (in-process ranks
// each have theirs). It must be comparable, as a pointer such as
// *goccl.Comm is; otherwise Save returns an error wrapping ErrConfig.
// Calls for one c must not overlap; calls for different communicators
// may run at once.
//
// The Store, and the shards it holds for other ranks, stays in memory
// until Forget(c), or until Rebind moves it to another communicator. For
// another Config, use New and the Store's methods instead.
func Save(ctx context.Context, c Comm, state []byte) error {
	s, err := keptStore("save", c)
	if err != nil {
		return err
	}
	return s.Save(ctx, state)
}

// Restore returns this rank's state as of the last committed Save, as
// (*Store).Restore does, from the Store kept for c. A rank that has none,
// a replacement, restores with a new, empty one, which is kept for c from
// then on. It is collective over c, and every rank of c uses the
// package-level functions, so that all have the default Config.
//
// After (*goccl.Comm).Readmit, each survivor first moves its Store to the
// new communicator with Rebind; the replacements call Restore on theirs:
//
//	w, err := f.Readmit(ctx) // f: the failed communicator, or one from Shrink
//	err = ckpt.Rebind(c, w)  // survivors only; c: the one they called Save on
//	state, err := ckpt.Restore(ctx, w)
//
// A survivor that restores on w without Rebind counts as a lost rank, and
// its Store stays kept for c until Forget(c).
func Restore(ctx context.Context, c Comm) ([]byte, error) {
	s, err := keptStore("restore", c)
	if err != nil {
		return nil, err
	}
	return s.Restore(ctx)
}

// Rebind moves the Store kept for from to to, as (*Store).Rebind does,
// typically from the communicator the survivors saved on to the one
// (*goccl.Comm).Readmit returns. to must have from's size and give this
// rank the same rank: a communicator from Shrink does not fit. Rebind
// returns an error wrapping ErrNoCheckpoint if no Store is kept for from,
// or ErrConfig if to does not fit or a Store is already kept for it; the
// Store then stays with from. Rebind is local: it sends nothing.
func Rebind(from, to Comm) error {
	if err := keyable("rebind", from); err != nil {
		return err
	}
	if err := keyable("rebind", to); err != nil {
		return err
	}
	kept.Lock()
	defer kept.Unlock()
	s := kept.m[from]
	if s == nil {
		return fmt.Errorf("ckpt: rebind rank %d: %w: no Store is kept for the old communicator", from.Rank(), ErrNoCheckpoint)
	}
	if t := kept.m[to]; t != nil && t != s {
		return fmt.Errorf("ckpt: rebind rank %d: %w: a Store is already kept for the new communicator", s.rank, ErrConfig)
	}
	if err := s.Rebind(to); err != nil {
		return err
	}
	delete(kept.m, from)
	kept.m[to] = s
	return nil
}

// Forget drops the Store kept for c, if any, and with it the shards this
// rank holds for the others; the next Save or Restore on c starts with an
// empty one, as a replacement rank would. Call it once c is done with
// (closed, or replaced by a communicator that the Store did not move to),
// or the Store stays in memory as long as the process runs.
func Forget(c Comm) {
	if keyable("forget", c) != nil {
		return // never kept
	}
	kept.Lock()
	delete(kept.m, c)
	kept.Unlock()
}

// keptStore returns the Store kept for c, making and keeping one with the
// default Config if there is none.
func keptStore(op string, c Comm) (*Store, error) {
	if err := keyable(op, c); err != nil {
		return nil, err
	}
	kept.Lock()
	defer kept.Unlock()
	if s := kept.m[c]; s != nil {
		return s, nil
	}
	s, err := New(c, Config{})
	if err != nil {
		return nil, err
	}
	kept.m[c] = s
	return s, nil
}

// keyable returns an error wrapping ErrConfig if c cannot be a map key.
func keyable(op string, c Comm) error {
	if c == nil || !reflect.TypeOf(c).Comparable() {
		return fmt.Errorf("ckpt: %s: %w: the communicator (%T) must be a non-nil comparable value, such as *goccl.Comm", op, ErrConfig, c)
	}
	return nil
}
