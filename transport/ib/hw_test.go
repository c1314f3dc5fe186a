//go:build ibverbs

package ib_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/ib"
	"github.com/goccl/goccl/transport/transporttest"
)

// These tests need an HCA and run only when asked (README.md, "Running on
// hardware"); CI compiles them with scripts/ib-check.sh.

// TestHardwareConformance runs the conformance suite over libibverbs on
// one host: every rank opens the device named by GOCCL_IB_HCA (or the
// first active port) and the queue pairs loop through the adapter.
// GOCCL_IB_TEST=1 turns it on.
func TestHardwareConformance(t *testing.T) {
	if os.Getenv("GOCCL_IB_TEST") != "1" {
		t.Skip("set GOCCL_IB_TEST=1 (and GOCCL_IB_HCA) to run over a real HCA")
	}
	transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint {
		return asEndpoints(connect(t, nil, size, func(c *ib.Config) {
			c.Provider, c.HCA = nil, os.Getenv(ib.EnvHCA)
		}))
	})
}

// TestHardwareTwoHosts exchanges messages of every size class between
// the ranks of a job spread over hosts. Each process sets
// GOCCL_IB_TEST_RANK, GOCCL_IB_TEST_SIZE and GOCCL_IB_TEST_STORE
// (host:port of the store, which rank 0 hosts), and GOCCL_SECRET alike.
func TestHardwareTwoHosts(t *testing.T) {
	addr := os.Getenv("GOCCL_IB_TEST_STORE")
	if addr == "" {
		t.Skip("set GOCCL_IB_TEST_RANK, GOCCL_IB_TEST_SIZE and GOCCL_IB_TEST_STORE on each host")
	}
	rank, err1 := strconv.Atoi(os.Getenv("GOCCL_IB_TEST_RANK"))
	size, err2 := strconv.Atoi(os.Getenv("GOCCL_IB_TEST_SIZE"))
	if err1 != nil || err2 != nil {
		t.Fatal("GOCCL_IB_TEST_RANK and GOCCL_IB_TEST_SIZE must be numbers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secret := []byte(os.Getenv("GOCCL_SECRET"))
	client, err := store.Host(ctx, addr, rank == 0, store.Options{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ep, err := ib.Connect(ctx, ib.Config{Rank: rank, Size: size, JobID: "ib-two-hosts",
		KV: store.WithPrefix(client, "goccl/ib-two-hosts/"), Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	next, prev := (rank+1)%size, (rank+size-1)%size
	for i, n := range []int{0, 1, 4000, 16 << 10, 1 << 20, 64 << 20} {
		got := make([]byte, n)
		r := ep.Irecv(prev, transport.Tag(i), got)
		if err := ep.Isend(next, transport.Tag(i), bytes.Repeat([]byte{byte(rank + i)}, n)).Wait(ctx); err != nil {
			t.Fatalf("send %d bytes to %d: %v", n, next, err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatalf("receive %d bytes from %d: %v", n, prev, err)
		}
		if !bytes.Equal(got, bytes.Repeat([]byte{byte(prev + i)}, n)) {
			t.Fatalf("%d bytes from %d: payload differs", n, prev)
		}
	}
	// A barrier through the store, so nobody closes while others still
	// write to it.
	if _, err := client.Add(ctx, "goccl/ib-two-hosts/done", 1); err != nil {
		t.Fatal(err)
	}
	for {
		v, err := client.Get(ctx, "goccl/ib-two-hosts/done")
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(string(v)); n >= size {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}
