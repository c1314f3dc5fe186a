package goccl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goccl/goccl/reduceop"
)

// A mismatch verdict about a call in a group is weighed against this
// rank's own call in that group: recentCall finds the group's history by
// the group id in the witness's fingerprint, not the world's (whose calls
// have sequence numbers of their own).
func TestBlameMismatchInGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := RunLocal(ctx, 3, func(ctx context.Context, c *Comm) error {
		g, err := c.Split(ctx, 0, c.Rank())
		if err != nil {
			return err
		}
		if err := g.AllReduce(ctx, make([]float32, 13), reduceop.Sum); err != nil {
			return err
		}
		if c.Rank() != 2 {
			return nil
		}
		h := &g.track.history
		g.shared.calls.Lock()
		mine := h.fps[(h.n-1)%historyLen]
		g.shared.calls.Unlock()
		other := mine
		other[16]++ // the same call of the group with another count
		// The witness (1) called other, the culprit (0) what this rank
		// called: the odd one is the witness.
		if got := g.blameMismatch(1, 0, other, mine); got != 1 {
			return fmt.Errorf("witness called another count: named %d, want the witness 1", got)
		}
		if got := g.blameMismatch(1, 0, mine, other); got != 0 {
			return fmt.Errorf("culprit called another count: named %d, want the culprit 0", got)
		}
		// A call of another group is not this one's.
		if _, ok := c.shared.recentCall(mine); !ok {
			return fmt.Errorf("the group's call is not found from the world")
		}
		world := mine
		world[12], world[13], world[14], world[15] = 0, 0, 0, 0
		if fp, ok := c.shared.recentCall(world); ok && fp == mine {
			return fmt.Errorf("the world's lookup returned the group's call")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
