package store

import (
	"bufio"
	"context"
	"net"
	"runtime"
	"testing"
)

// TestIdleConnCost measures what an idle, authenticated client connection
// costs the server: a goroutine and its stack, the read buffer, the
// connection's state, and (in this process) the Go side of the client's
// socket, which a plain net.Conn holds here instead of a Client. It is a
// figure for BENCHMARKS.md ("Scale"), logged, not asserted, apart from a
// bound above it that the 4 KiB reader and writer each connection held before (23 KB in all) would break.
func TestIdleConnCost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{})
	go srv.Serve(context.Background(), ln)
	defer srv.Close()
	const k = 200
	mem := func() (heap, stack uint64) {
		runtime.GC()
		runtime.GC() // the second shrinks the stacks the first found mostly unused
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse, ms.StackInuse
	}
	heap0, stack0 := mem()
	conns := make([]net.Conn, 0, k)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range k {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := readMsg(bufio.NewReader(c), 1<<20); err != nil { // the hello
			t.Fatal(err)
		}
		// A request: the server has authenticated the connection and
		// waits in its read loop.
		if _, err := c.Write(appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("k"), []byte("v")}})); err != nil {
			t.Fatal(err)
		}
		if _, err := readMsg(bufio.NewReader(c), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	heap1, stack1 := mem()
	perHeap, perStack := (float64(heap1)-float64(heap0))/k, (float64(stack1)-float64(stack0))/k
	per := perHeap + perStack
	t.Logf("an idle store connection: %.0f bytes, %.0f of heap (buffers, state, and the client socket's Go side) and %.0f of goroutine stack, over %d connections", per, perHeap, perStack, k)
	if per > 16<<10 {
		t.Errorf("an idle store connection costs %.0f bytes, want a few KB", per)
	}
}
