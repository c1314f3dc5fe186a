//go:build linux

package shm_test

import (
	"context"
	"fmt"
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
