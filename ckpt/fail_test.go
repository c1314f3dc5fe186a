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

var errInjected = errors.New("injected failure")

// flaky is a Comm whose next shard exchange fails before sending anything
// (on every rank, so no rank is left waiting), or whose next commit vote
// fails after it completed (a rank that did not learn the outcome).
type flaky struct {
	*goccl.Comm
	failExchange bool
	failVote     bool
	gathers      int
}

func (f *flaky) AllToAllSplit(ctx context.Context, send any, sc []int, recv any, rc []int) error {
	if f.failExchange {
		f.failExchange = false
		return errInjected
	}
	return f.Comm.AllToAllSplit(ctx, send, sc, recv, rc)
}

func (f *flaky) AllGather(ctx context.Context, send, recv any) error {
	err := f.Comm.AllGather(ctx, send, recv)
	f.gathers++
	if f.failVote && f.gathers%2 == 0 { // Save's second all-gather is the vote
		f.failVote = false
		return errInjected
	}
	return err
}

// TestFailedSave checks that a Save that fails keeps the last good
// generation, and that a commit only some ranks saw is not lost.
func TestFailedSave(t *testing.T) {
	const n = 6
	cfg := ckpt.Config{DataShards: 3, ParityShards: 2}
	for _, tc := range []struct {
		name      string
		exchange  bool  // the shard exchange fails everywhere
		vote      []int // ranks whose vote fails after completing
		saveAgain bool  // a third Save before the failure
		wantGen   int
	}{
		{"exchange fails", true, nil, false, 1},
		{"vote lost on rank 0", false, []int{0}, false, 2},
		{"vote lost on ranks 2 and 5, then saved again", false, []int{2, 5}, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(t, n, func(ctx context.Context, c *goccl.Comm) error {
				r := c.Rank()
				f := &flaky{Comm: c}
				s, err := ckpt.New(f, cfg)
				if err != nil {
					return err
				}
				if err := s.Save(ctx, stateFor(r, 1)); err != nil {
					return err
				}
				f.failExchange = tc.exchange
				f.failVote = containsInt(tc.vote, r)
				err = s.Save(ctx, stateFor(r, 2))
				if failed := tc.exchange || f.gathers == 4 && containsInt(tc.vote, r); failed != (err != nil) || err != nil && !errors.Is(err, errInjected) {
					return fmt.Errorf("rank %d: second Save = %v", r, err)
				}
				if tc.saveAgain {
					if err := s.Save(ctx, stateFor(r, 3)); err != nil {
						return err
					}
				}
				if r == 1 || r == 3 {
					s, _ = ckpt.New(f, cfg)
				}
				st, err := s.Restore(ctx)
				if err != nil {
					return err
				}
				if !bytes.Equal(st, stateFor(r, tc.wantGen)) {
					return fmt.Errorf("rank %d: restored state is not generation %d", r, tc.wantGen)
				}
				if g := s.Generation(); g != uint64(tc.wantGen) {
					return fmt.Errorf("rank %d: Generation() = %d after Restore, want %d", r, g, tc.wantGen)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
