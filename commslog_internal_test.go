package goccl_test

import (
	"context"
	"slices"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/commslog"
)

// The comms log holds the user's calls only: an object collective is one
// record (not its inner broadcasts), Split's all-gather and Init's barrier
// are not recorded.
func TestCommsLogRecordsUserCallsOnly(t *testing.T) {
	logs := make([][]string, 3)
	err := goccl.RunLocal(context.Background(), 3, func(ctx context.Context, c *goccl.Comm) error {
		if _, err := goccl.BroadcastObject(ctx, c, map[string]int{"a": 1}, 0); err != nil {
			return err
		}
		if _, err := c.Split(ctx, c.Rank()%2, 0); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		for _, r := range c.CommsLog().Records() {
			logs[c.Rank()] = append(logs[c.Rank()], r.Op)
		}
		return nil
	}, goccl.WithCommsLog(commslog.Config{Enabled: true}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{commslog.BroadcastObjectList, commslog.Barrier}
	for r, ops := range logs {
		if !slices.Equal(ops, want) {
			t.Errorf("rank %d logged %v, want %v", r, ops, want)
		}
	}
}
