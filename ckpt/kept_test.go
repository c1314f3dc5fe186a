package ckpt_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ckpt"
)

// TestPackageKeys runs two worlds' ranks at once through the package-level
// functions: each communicator value has its own Store, Rebind moves one
// only to a communicator that has none, and Forget drops them.
func TestPackageKeys(t *testing.T) {
	const n = 4
	a, b := localComms(t, n), localComms(t, n)
	ctx := testCtx(t)
	err := eachRank(n, func(r int) error {
		if err := ckpt.Rebind(a[r], b[r]); !errors.Is(err, ckpt.ErrNoCheckpoint) {
			return fmt.Errorf("rank %d: Rebind before Save: %v, want ErrNoCheckpoint", r, err)
		}
		if err := ckpt.Save(ctx, a[r], stateFor(r, 1)); err != nil {
			return err
		}
		if err := ckpt.Save(ctx, b[r], stateFor(r, 2)); err != nil {
			return err
		}
		if err := ckpt.Rebind(a[r], b[r]); !errors.Is(err, ckpt.ErrConfig) {
			return fmt.Errorf("rank %d: Rebind onto a kept Store: %v, want ErrConfig", r, err)
		}
		ckpt.Forget(b[r])
		if err := ckpt.Rebind(a[r], b[r]); err != nil {
			return err
		}
		defer ckpt.Forget(b[r])
		if ckpt.KeptStore(a[r]) != nil {
			return fmt.Errorf("rank %d: a Store is still kept for the old communicator after Rebind", r)
		}
		got, err := ckpt.Restore(ctx, b[r])
		if err != nil {
			return err
		}
		if !bytes.Equal(got, stateFor(r, 1)) {
			return fmt.Errorf("rank %d: restored state is not the one saved on the first world", r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkNoneKept(t)
}

// uncomparable is a Comm that cannot be a map key.
type uncomparable struct {
	*goccl.Comm
	_ []int
}

// TestPackageBadComm checks that the package-level functions refuse, with
// ErrConfig and before sending anything, a communicator that cannot be a
// key or has too few ranks, and keep nothing for it.
func TestPackageBadComm(t *testing.T) {
	ctx := context.Background()
	comms := localComms(t, 2) // k+m <= 1: too few
	check := func(c ckpt.Comm, errs ...error) {
		t.Helper()
		for _, err := range errs {
			if !errors.Is(err, ckpt.ErrConfig) {
				t.Errorf("communicator %T: %v, want ErrConfig", c, err)
			}
		}
	}
	for _, c := range []ckpt.Comm{nil, uncomparable{Comm: comms[0]}} {
		_, err := ckpt.Restore(ctx, c)
		check(c, err, ckpt.Save(ctx, c, nil), ckpt.Rebind(c, comms[1]), ckpt.Rebind(comms[1], c))
		ckpt.Forget(c) // no panic
	}
	_, err := ckpt.Restore(ctx, comms[0])
	check(comms[0], err, ckpt.Save(ctx, comms[0], nil))
	checkNoneKept(t)
}
