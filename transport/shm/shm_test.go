//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
	"github.com/goccl/goccl/transport/transporttest"
)

var jobs atomic.Int64

// connectAll connects size ranks as goroutines of this process, each with
// its own mappings.
func connectAll(t testing.TB, size int, cfg shm.Config) []*shm.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.JobID == "" {
		cfg.JobID = fmt.Sprintf("test%d", jobs.Add(1))
	}
	if cfg.Nonce == "" {
		cfg.Nonce = fmt.Sprint(time.Now().UnixNano())
	}
	eps := make([]*shm.Endpoint, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Rank, c.Size = i, size
			eps[i], errs[i] = shm.Connect(ctx, c)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, ep := range eps {
				if ep != nil {
					ep.Close()
				}
			}
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	return eps
}

func endpoints(eps []*shm.Endpoint) []transport.Endpoint {
	out := make([]transport.Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = ep
	}
	return out
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint { return endpoints(connectAll(t, size, shm.Config{})) })
}

// TestConformanceSmallRing runs the suite with a ring of 4 slots of 64
// bytes, no spinning and no CMA: every message of more than 32 bytes is split,
// writers wait for space and every wait parks on the futex.
func TestConformanceSmallRing(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return endpoints(connectAll(t, size, shm.Config{SlotSize: 64, Slots: 4, Spin: -1, CMAThreshold: -1}))
	})
}

// TestConformanceYield runs the suite with the waits of a host with more
// ranks than cores: they poll for long and give the core away between
// polls (Config.Yield).
func TestConformanceYield(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return endpoints(connectAll(t, size, shm.Config{Spin: 10 * time.Millisecond, Yield: true}))
	})
}

// TestConformanceHelp runs the suite with callers that drain the rings
// (Config.Help), on rings of 4 slots of 64 bytes, where most messages take
// several slots and their writers wait for room, and on the default
// rings, each with the waits of more ranks than cores and of a core a
// rank.
func TestConformanceHelp(t *testing.T) {
	for _, cfg := range []shm.Config{
		{SlotSize: 64, Slots: 4, Spin: 10 * time.Millisecond, Yield: true, Help: true},
		{Spin: 10 * time.Millisecond, Yield: true, Help: true},
		{SlotSize: 64, Slots: 4, Spin: 10 * time.Millisecond, Yield: true, Help: true, StandBack: true},
		{Spin: 10 * time.Millisecond, Yield: true, Help: true, StandBack: true},
		{SlotSize: 64, Slots: 4, Help: true},
		{Help: true},
	} {
		t.Run(fmt.Sprintf("slot%d-yield=%v-standback=%v", cfg.SlotSize, cfg.Yield, cfg.StandBack), func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint { return endpoints(connectAll(t, size, cfg)) })
		})
	}
}

// TestConnectTimeout: a rank whose peer never comes gives up when its
// context ends and leaves no segment behind.
func TestConnectTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	job := fmt.Sprintf("timeout%d", jobs.Add(1))
	_, err := shm.Connect(ctx, shm.Config{Rank: 0, Size: 2, JobID: job, Nonce: "n"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect without a peer: %v", err)
	}
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("segments left: %v", l)
	}
}

// TestConnectTwice: a second rank claiming the same place in the same job
// is refused (the segments are created with O_EXCL).
func TestConnectTwice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job := fmt.Sprintf("twice%d", jobs.Add(1))
	cfg := shm.Config{Rank: 0, Size: 2, JobID: job, Nonce: "n"}
	first := make(chan error, 1)
	go func() {
		_, err := shm.Connect(ctx, cfg) // waits for rank 1, which never comes
		first <- err
	}()
	for len(leftovers(t, job)) == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if _, err := shm.Connect(ctx, cfg); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Connect as rank 0: %v, want a refusal", err)
	}
	cancel()
	<-first
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("segments left: %v", l)
	}
}

// TestPlantedSegment: a file in the peer's segment's place that others may
// write is refused, not mapped.
func TestPlantedSegment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job := fmt.Sprintf("planted%d", jobs.Add(1))
	name := filepath.Join(shm.DefaultDir, shm.SegmentName(job, "n", 0, 1))
	if err := os.WriteFile(name, make([]byte, 8192), 0o644); err != nil {
		t.Skip(err)
	}
	defer os.Remove(name)
	if err := os.Chmod(name, 0o666); err != nil {
		t.Fatal(err)
	}
	_, err := shm.Connect(ctx, shm.Config{Rank: 1, Size: 2, JobID: job, Nonce: "n"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Connect over a planted segment: %v", err)
	}
	os.Remove(name)
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("segments left: %v", l)
	}
}
