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
