package ib_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/ib/ibfake"
	"github.com/goccl/goccl/transport/transporttest"
)

// memKV is an in-memory KV: Get waits until the key is set.
type memKV struct {
	mu   sync.Mutex
	vals map[string][]byte
	set  map[string]chan struct{} // closed when the key is first set
}

func newMemKV() *memKV {
	return &memKV{vals: map[string][]byte{}, set: map[string]chan struct{}{}}
}

func (kv *memKV) ch(key string) chan struct{} {
	c := kv.set[key]
	if c == nil {
		c = make(chan struct{})
		kv.set[key] = c
	}
	return c
}

func (kv *memKV) Set(ctx context.Context, key string, value []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	_, had := kv.vals[key]
	kv.vals[key] = append([]byte(nil), value...)
	if !had {
		close(kv.ch(key))
	}
	return nil
}

func (kv *memKV) Get(ctx context.Context, key string) ([]byte, error) {
	kv.mu.Lock()
	c := kv.ch(key)
	kv.mu.Unlock()
	select {
	case <-c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return kv.vals[key], nil
}

// devName is the fake device of rank r.
func devName(r int) string { return fmt.Sprintf("hca%d", r) }

// connect builds a mesh of size ranks over fabric f, each rank with the
// fake device devName(rank); tweak adjusts each rank's Config.
func connect(t testing.TB, f *ibfake.Fabric, size int, tweak func(*ib.Config)) []*ib.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv := newMemKV()
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
