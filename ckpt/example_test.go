package ckpt_test

import (
	"context"
	"fmt"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ckpt"
)

// Six ranks save their state with 3 data and 2 parity shards; ranks 1 and 2
// then lose their memory, fresh ranks take their places, and every rank
// gets its saved state back.
func Example() {
	ctx := context.Background()
	restored := make([]string, 6)
	err := goccl.RunLocal(ctx, 6, func(ctx context.Context, c *goccl.Comm) error {
		cfg := ckpt.Config{DataShards: 3, ParityShards: 2}
		s, err := ckpt.New(c, cfg)
		if err != nil {
			return err
		}
		state := fmt.Appendf(nil, "weights of rank %d", c.Rank())
		if err := s.Save(ctx, state); err != nil {
			return err
		}
		if c.Rank() == 1 || c.Rank() == 2 {
			s, _ = ckpt.New(c, cfg) // a replacement: empty memory
		}
		got, err := s.Restore(ctx)
		if err != nil {
			return err
		}
		restored[c.Rank()] = string(got)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	fmt.Println(restored[1])
	fmt.Println(restored[2])
	// Output:
	// weights of rank 1
	// weights of rank 2
}

// The package-level Save and Restore keep each rank's Store for it, keyed
// by its communicator. Six ranks save, ranks 0 and 3 lose their memory
// (Forget, as a replacement process would start), and every rank restores.
func ExampleSave() {
	ctx := context.Background()
	restored := make([]string, 6)
	err := goccl.RunLocal(ctx, 6, func(ctx context.Context, c *goccl.Comm) error {
		defer ckpt.Forget(c) // the Store lives until then
		state := fmt.Appendf(nil, "step 9 of rank %d", c.Rank())
		if err := ckpt.Save(ctx, c, state); err != nil { // k=3, m=2 on 6 ranks
			return err
		}
		if c.Rank() == 0 || c.Rank() == 3 {
			ckpt.Forget(c) // lost: no shards, no state
		}
		got, err := ckpt.Restore(ctx, c)
		if err != nil {
			return err
		}
		restored[c.Rank()] = string(got)
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	fmt.Println(restored[0])
	fmt.Println(restored[3])
	// Output:
	// step 9 of rank 0
	// step 9 of rank 3
}
