//go:build linux

package route_test

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

var shmJobs atomic.Int64

// shmLocal is a pretend host's shm: its ranks connect as goroutines of
// this process, each mapping the segments anew.
func shmLocal(t *testing.T, ranks []int) []transport.Endpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job, nonce := fmt.Sprintf("routetest%d", shmJobs.Add(1)), fmt.Sprint(time.Now().UnixNano())
	eps := make([]transport.Endpoint, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Go(func() {
			ep, err := shm.Connect(ctx, shm.Config{Rank: i, Size: len(ranks), JobID: job, Nonce: nonce})
			if err == nil {
				eps[i] = ep
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, ep := range eps {
				if ep != nil {
					ep.Close()
				}
			}
			t.Fatalf("shm rank %d: %v", i, err)
		}
	}
	return eps
}

// TestConformanceShm runs the suite over shm within each pretend host and
// mem between them, as Init's auto selection pairs shm with TCP.
func TestConformanceShm(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return asEndpoints(routed(t, size, shmLocal))
	})
}

// TestBoardShm is TestBoardMem with each pretend host's ranks over shm:
// the board is a segment the host's processes (here, Connects) share.
func TestBoardShm(t *testing.T) { testBoard(t, shmLocal) }
