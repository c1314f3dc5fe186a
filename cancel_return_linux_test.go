//go:build linux

package goccl_test

import (
	"context"
	"testing"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/testutil"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

func init() {
	cancelWorlds["shm"] = func(t *testing.T, n int) []*goccl.Comm {
		const nonce = "cancel"
		return worldOver(t, n, func(ctx context.Context, job string, _ *testutil.KV, q int) (transport.Endpoint, error) {
			return shm.Connect(ctx, shm.Config{Rank: q, Size: n, JobID: job, Nonce: nonce})
		})
	}
}
