package goccl_test

import (
	"context"
	"net"
	"slices"
	"sync"
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

// Init's closing barrier is goccl's own: a rank's log starts empty.
func TestCommsLogSkipsInitBarrier(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx := context.Background()
	var wg, read sync.WaitGroup
	logs := make([][]string, 2)
	errs := make([]error, 2)
	read.Add(2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := goccl.Init(ctx, goccl.WithCommsLog(commslog.Config{Enabled: true}),
				goccl.WithEnv(goccl.Env{Rank: r, Size: 2, LocalRank: r, LocalSize: 2, MasterAddr: "127.0.0.1", MasterPort: port}))
			if err != nil {
				errs[r] = err
				read.Done()
				return
			}
			for _, rec := range c.CommsLog().Records() {
				logs[r] = append(logs[r], rec.Op)
			}
			// Rank 0 hosts the store: it must not close while rank 1 is
			// still finishing Init, as no real job would.
			read.Done()
			read.Wait()
			c.Close()
		}()
	}
	wg.Wait()
	for r := range 2 {
		if errs[r] != nil || len(logs[r]) != 0 {
			t.Errorf("rank %d: %v, logged %v before any call of its own", r, errs[r], logs[r])
		}
	}
}
