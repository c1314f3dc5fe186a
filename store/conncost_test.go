//go:build linux

package store

import (
	"bufio"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/testutil"
)

// TestIdleConnCost measures what an idle, authenticated client connection
// costs the server once it has parked at the idle poller: its socket's Go
// side, its srvConn and context, its slot in the poller's set, and (in
// this process) the Go side of the client's socket, which a plain net.Conn
// holds here instead of a Client. It is a figure for BENCHMARKS.md
// ("Scale"), logged, and bounded: a goroutine per connection (8 KiB of
// stack, what every connection cost before the poller: 10-11 KB in all) or
// a read buffer kept per connection breaks the bound, as does a goroutine
// count that grows with the connections.
func TestIdleConnCost(t *testing.T) {
	const k = 1000
	testutil.RaiseFileLimit(t, 2*k+100)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{})
	srv.idleAfter = time.Millisecond // park at once: the test waits for it below
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(context.Background(), ln) }()
	defer func() { srv.Close(); <-served }()
	mem := func() (heap, stack uint64) {
		runtime.GC()
		runtime.GC() // the second shrinks the stacks the first found mostly unused
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse, ms.StackInuse
	}
	// One connection first, so that the poller and its buffers exist
	// before the baseline: they are the server's, not a connection's.
	conns := make([]net.Conn, 0, k+1)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	dial := func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := readMsg(bufio.NewReader(c), 1<<20); err != nil { // the hello
			t.Fatal(err)
		}
		// A request: the server has authenticated the connection, and its
		// goroutine waits for the next one, then parks it.
		if _, err := c.Write(appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("k"), []byte("v")}})); err != nil {
			t.Fatal(err)
		}
		if _, err := readMsg(bufio.NewReader(c), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	// settle waits until n connections are parked and their goroutines
	// have gone (g0 counts the goroutines of the test and of Serve).
	settle := func(n, g int) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for srv.parked() != n || runtime.NumGoroutine() > g {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d connections parked, %d goroutines (want at most %d)", srv.parked(), n, runtime.NumGoroutine(), g)
			}
			time.Sleep(time.Millisecond)
		}
	}
	g0 := runtime.NumGoroutine()
	dial()
	settle(1, g0+1) // and the poller's goroutine
	heap0, stack0 := mem()
	for range k {
		dial()
	}
	settle(k+1, g0+1)
	heap1, stack1 := mem()
	perHeap, perStack := (float64(heap1)-float64(heap0))/k, (float64(stack1)-float64(stack0))/k
	per := perHeap + perStack
	t.Logf("an idle store connection: %.0f bytes, %.0f of heap (socket, state, and the client socket's Go side) and %.0f of goroutine stack, over %d connections", per, perHeap, perStack, k)
	if per > 3<<10 {
		t.Errorf("an idle store connection costs %.0f bytes, want at most 3 KiB", per)
	}
}
