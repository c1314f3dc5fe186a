//go:build linux

package quiet

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/testutil"
)

// pair returns two ends of a loopback TCP connection, both wrapped.
func pair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	d, s := testutil.TCPPair(t)
	var err error
	if a, err = Wrap(d); err != nil {
		t.Fatal(err)
	}
	if b, err = Wrap(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestReadWrite(t *testing.T) {
	a, b := pair(t)
	msg := bytes.Repeat([]byte("goccl"), 1<<20) // more than the socket buffers hold
	errc := make(chan error, 1)
	go func() {
		_, err := a.Write(msg)
		errc <- err
	}()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("the bytes read differ from the bytes written")
	}
}

func TestWriteBuffersConsumes(t *testing.T) {
	a, b := pair(t)
	bufs := net.Buffers{[]byte("head"), nil, bytes.Repeat([]byte{7}, 3<<20)}
	want := int64(4 + 3<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.CopyN(io.Discard, b, want)
	}()
	n, err := a.(*Conn).WriteBuffers(&bufs)
	if err != nil || n != want || len(bufs) != 0 {
		t.Fatalf("WriteBuffers = %d, %v, %d buffers left; want %d, nil, 0", n, err, len(bufs), want)
	}
	<-done
}

func TestEOF(t *testing.T) {
	a, b := pair(t)
	a.Close()
	if _, err := b.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want io.EOF", err)
	}
}

func TestReadDeadline(t *testing.T) {
	_, b := pair(t)
	b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := b.Read(make([]byte, 8))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	// A deadline in the past fails at once, even with bytes to read, as a
	// net.Conn does (transport/tcp interrupts a reader this way).
	b.SetReadDeadline(time.Time{})
	b.SetReadDeadline(time.Unix(1, 0))
	if _, err := b.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with a past deadline: %v", err)
	}
}

// TestDeadlineInterrupts: a deadline set while a read waits wakes it.
func TestDeadlineInterrupts(t *testing.T) {
	a, b := pair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Read(make([]byte, 8))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let it park (the test holds without)
	b.SetReadDeadline(time.Unix(1, 0))
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("interrupted read: %v", err)
	}
	// The link still works once the deadline is lifted.
	b.SetReadDeadline(time.Time{})
	a.Write([]byte("x"))
	if _, err := io.ReadFull(b, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
}

func TestCloseWakesWaiters(t *testing.T) {
	_, b := pair(t)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); _, errs[0] = b.Read(make([]byte, 8)) }()
	go func() {
		defer wg.Done()
		rc, _ := b.(*Conn).SyscallConn()
		errs[1] = rc.Read(func(uintptr) bool { return false }) // waits forever but for Close
	}()
	time.Sleep(10 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("waiter %d after Close: %v, want net.ErrClosed", i, err)
		}
	}
	if err := b.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// TestRawReadWaits: RawConn.Read calls f again once bytes arrive.
func TestRawReadWaits(t *testing.T) {
	a, b := pair(t)
	rc, _ := b.(*Conn).SyscallConn()
	go func() {
		time.Sleep(5 * time.Millisecond)
		a.Write([]byte("ping"))
	}()
	var got []byte
	err := rc.Read(func(fd uintptr) bool {
		buf := make([]byte, 8)
		n, err := readFD(int(fd), buf)
		if err != nil {
			return false
		}
		got = buf[:n]
		return true
	})
	if err != nil || string(got) != "ping" {
		t.Fatalf("raw read: %q, %v", got, err)
	}
}

// TestPingPong runs many short exchanges in both directions at once, each
// end reading and writing from its own goroutine, so that arming, reports
// and signals interleave (run it under -race).
func TestPingPong(t *testing.T) {
	a, b := pair(t)
	const rounds = 2000
	var wg sync.WaitGroup
	echo := func(c net.Conn, first bool) {
		defer wg.Done()
		buf := make([]byte, 16)
		for i := range rounds {
			if first || i > 0 {
				if _, err := c.Write(buf); err != nil {
					t.Error(err)
					return
				}
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				t.Error(err)
				return
			}
			if i%64 == 0 {
				runtime.Gosched()
			}
		}
	}
	wg.Add(2)
	go echo(a, true)
	go echo(b, true)
	wg.Wait()
}

// TestSetStops: the set's goroutine ends with the last Conn.
func TestSetStops(t *testing.T) {
	a, b := pair(t)
	a.Close()
	b.Close()
	set.life.Lock()
	open := set.open
	set.life.Unlock()
	if open != 0 {
		t.Fatalf("%d Conns still in the set", open)
	}
}

// TestWriteDoneStaysDone: a write whose bytes have all gone succeeds,
// though its deadline passes (or the conn is closed) after the last
// writev: the sender must not take a delivered message for a lost one.
func TestWriteDoneStaysDone(t *testing.T) {
	a, b := pair(t)
	afterWrite = func(c *Conn) { c.SetWriteDeadline(time.Unix(1, 0)) }
	t.Cleanup(func() { afterWrite = nil })
	if n, err := a.Write([]byte("done")); n != 4 || err != nil {
		t.Fatalf("Write = %d, %v; want 4, nil", n, err)
	}
	if _, err := io.ReadFull(b, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
}
