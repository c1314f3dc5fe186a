package ib_test

import (
	"context"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
	"github.com/goccl/goccl/transport/transporttest"
)

// devName is the fake device of rank r.
func devName(r int) string { return fmt.Sprintf("hca%d", r) }

// connect builds a mesh of size ranks over fabric f, each rank with the
// fake device devName(rank); tweak adjusts each rank's Config.
func connect(t testing.TB, f *ibfake.Fabric, size int, tweak func(*ib.Config)) []*ib.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv := testutil.NewKV()
	if f != nil {
		// Runs after the endpoints are closed (cleanups run last first).
		t.Cleanup(func() { checkFabric(t, f) })
	}
	eps := make([]*ib.Endpoint, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			cfg := ib.Config{Rank: r, Size: size, JobID: "job", KV: kv, Provider: f.Provider(),
				HCA: devName(r), Secret: []byte("s3cret")}
			if tweak != nil {
				tweak(&cfg)
			}
			eps[r], errs[r] = ib.Connect(ctx, cfg)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, ep := range eps {
				if ep != nil {
					ep.Close()
				}
			}
			t.Fatalf("rank %d: Connect: %v", r, err)
		}
	}
	return eps
}

// checkFabric fails t if an endpoint freed a verbs object twice, left one
// alive when it closed its device, or never closed its device.
func checkFabric(t testing.TB, f *ibfake.Fabric) {
	t.Helper()
	for _, m := range f.Misuse() {
		t.Errorf("fake fabric: %s", m)
	}
	if open := f.Unclosed(); len(open) > 0 {
		t.Errorf("fake fabric: devices %v never closed", open)
	}
}

func asEndpoints(eps []*ib.Endpoint) []transport.Endpoint {
	out := make([]transport.Endpoint, len(eps))
	for i, ep := range eps {
		out[i] = ep
	}
	return out
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return asEndpoints(connect(t, ibfake.New(), size, nil))
	})
}

// TestConformanceSmallSlots runs the suite with slots of 256 bytes and 4
// credits, so that most messages go by rendezvous and senders run out of
// credits all the time.
func TestConformanceSmallSlots(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return asEndpoints(connect(t, ibfake.New(), size, func(c *ib.Config) {
			c.SlotSize, c.RecvDepth, c.RegCacheBytes = 256, 4, -1
		}))
	})
}

// TestConformanceSlowCQ runs the suite with every completion held back
// for 200 µs and the progress goroutine parking at once.
func TestConformanceSlowCQ(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		f := ibfake.New()
		f.SetCQDelay(200 * time.Microsecond)
		return asEndpoints(connect(t, f, size, func(c *ib.Config) { c.Spin = -1 }))
	})
}

// TestConformanceRead runs the suite with every large message fetched by
// the receiver with RDMA READ, and with half the ranks (the odd ones)
// offering reads while the others are written to: a receiver follows
// each sender's announcement.
func TestConformanceRead(t *testing.T) {
	for _, mixed := range []bool{false, true} {
		t.Run(map[bool]string{false: "all", true: "mixed"}[mixed], func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
				return asEndpoints(connect(t, ibfake.New(), size, func(c *ib.Config) {
					c.RendezvousRead = !mixed || c.Rank%2 == 1
					c.SlotSize, c.RecvDepth = 1024, 4
				}))
			})
		})
	}
}
