package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/testutil"
	"github.com/goccl/goccl/transport"
)

// setReadIdle sets readIdle for the endpoints a test makes after it.
func setReadIdle(t *testing.T, d time.Duration) {
	old := readIdle
	readIdle = d
	t.Cleanup(func() { readIdle = old })
}

func frameBytes(tag transport.Tag, payload []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(tag))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(payload)))
	return append(b, payload...)
}

// write writes b to c on a goroutine (a net.Pipe write waits for the
// reader) and returns the write's outcome.
func write(c net.Conn, b []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(b)
		done <- err
	}()
	return done
}

// freeToken makes a waiter take the read token from readLoop, so that the
// token is free afterwards (readLoop takes it back only after readIdle).
func freeToken(t *testing.T, ctx context.Context, e *endpoint, raw net.Conn) {
	t.Helper()
	r := e.Irecv(1, 99, make([]byte, 1))
	w := write(raw, frameBytes(99, []byte{1}))
	if err := r.Wait(ctx); err != nil {
		t.Fatalf("first receive: %v", err)
	}
	if err := <-w; err != nil {
		t.Fatal(err)
	}
}

// A waiter whose ctx ends half-way through reading a frame itself leaves
// the frame to readLoop: the receive completes later, with the whole
// payload, although no one waits on it.
func TestWaitEndsMidFrame(t *testing.T) {
	setReadIdle(t, time.Hour) // only the hand-off can make readLoop read
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, raw := pipeEndpoint(t)
	freeToken(t, ctx, e, raw)

	buf := make([]byte, 8)
	r := e.Irecv(1, 7, buf)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	msg := frameBytes(7, want)
	w := write(raw, msg[:headerLen+3])
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := r.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want DeadlineExceeded", err)
	}
	if err := <-w; err != nil {
		t.Fatal(err) // the waiter read the header and 3 bytes
	}
	// The waiter has handed the token to readLoop, which may be reading
	// the frame's state now: what shows that the 3 bytes were kept is
	// that the rest completes the receive with the right bytes, in step.
	w = write(raw, msg[headerLen+3:])
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("the rest of the frame was not read")
	}
	if err := r.Err(); err != nil || !bytes.Equal(buf, want) {
		t.Fatalf("receive: %v, % x; want % x", err, buf, want)
	}
	if err := <-w; err != nil {
		t.Fatal(err)
	}
	// The link is in step: the next frame lands whole.
	r = e.Irecv(1, 7, buf)
	w = write(raw, frameBytes(7, []byte("abcdefgh")))
	if err := r.Wait(ctx); err != nil || string(buf) != "abcdefgh" {
		t.Fatalf("next receive: %v, %q", err, buf)
	}
	<-w
}

// A message for a receive that no one waits on is read once the free
// token has lain unused for readIdle.
func TestReadWithoutWaiter(t *testing.T) {
	setReadIdle(t, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, raw := pipeEndpoint(t)
	freeToken(t, ctx, e, raw)
	buf := make([]byte, 3)
	r := e.Irecv(1, 5, buf)
	w := write(raw, frameBytes(5, []byte("xyz")))
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("a receive no one waits on did not complete")
	}
	if err := r.Err(); err != nil || string(buf) != "xyz" {
		t.Fatalf("receive: %v, %q", err, buf)
	}
	<-w
}

// Ctx ending while a waiter holds the token and the socket is idle frees
// the token; a later wait reads on.
func TestWaitEndsBetweenFrames(t *testing.T) {
	setReadIdle(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, raw := pipeEndpoint(t)
	freeToken(t, ctx, e, raw)
	buf := make([]byte, 2)
	r := e.Irecv(1, 3, buf)
	for range 3 {
		short, cancelShort := context.WithTimeout(ctx, 10*time.Millisecond)
		err := r.Wait(short)
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait: %v, want DeadlineExceeded", err)
		}
	}
	w := write(raw, frameBytes(3, []byte("ok")))
	if err := r.Wait(ctx); err != nil || string(buf) != "ok" {
		t.Fatalf("receive: %v, %q", err, buf)
	}
	<-w
}

// tcpPair makes ranks 0 and 1 of a job joined by one loopback TCP
// connection, without Connect's handshake.
func tcpPair(t *testing.T, sockBuf int) [2]*endpoint {
	return tcpPairConfig(t, func(c *Config) { c.SocketBuffer = sockBuf })
}

// tcpPairConfig is tcpPair with the Config that set makes.
func tcpPairConfig(t *testing.T, set func(*Config)) [2]*endpoint {
	a, b := testutil.TCPPair(t)
	var eps [2]*endpoint
	var err error
	for r, c := range []net.Conn{a, b} {
		cfg := Config{Rank: r, Size: 2, Logger: discardLogger}
		set(&cfg)
		cfg.defaults()
		conns := make([][]net.Conn, 2)
		conns[1-r] = []net.Conn{c}
		if eps[r], err = newEndpoint(&cfg, conns, discardLogger); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eps[r].Close() })
	}
	return eps
}

// Two ranks that send each other more than the socket buffers hold and
// wait on their sends first must not wait on each other: a blocked send
// gets readLoop reading, although the token was free.
func TestSendsBothWaysWaitSendFirst(t *testing.T) {
	setReadIdle(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps := tcpPair(t, 64<<10)
	// A small exchange hands each token to a waiter, which leaves it free.
	for i, e := range eps {
		if err := e.Isend(1-i, 1, []byte{byte(i)}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, e := range eps {
		if err := e.Irecv(1-i, 1, make([]byte, 1)).Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const n = 8 << 20
	errs := make(chan error, 2)
	for i, e := range eps {
		go func() {
			want := bytes.Repeat([]byte{byte(i + 1)}, n)
			got := make([]byte, n)
			r := e.Irecv(1-i, 2, got)
			if err := e.Isend(1-i, 2, want).Wait(ctx); err != nil {
				errs <- err
				return
			}
			if err := r.Wait(ctx); err != nil {
				errs <- err
				return
			}
			if got[0] != byte(2-i) || got[n-1] != byte(2-i) {
				errs <- errors.New("payload differs")
				return
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A waiter polling the socket sees the peer's end close.
func TestWaiterSeesEOF(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	eps := tcpPair(t, 0)
	// Many rounds, so the waiter also polls (spinReader) when EOF comes.
	buf := make([]byte, 4)
	for i := range 100 {
		r := eps[1].Irecv(0, 1, buf)
		if err := eps[0].Isend(1, 1, []byte{1, 2, 3, byte(i)}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil || buf[3] != byte(i) {
			t.Fatalf("round %d: %v, % x", i, err, buf)
		}
	}
	r := eps[1].Irecv(0, 1, buf)
	go func() {
		time.Sleep(10 * time.Millisecond)
		eps[0].Close()
	}()
	err := r.Wait(ctx)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != 0 {
		t.Fatalf("got %v, want PeerError{Peer: 0} wrapping ErrPeerClosed", err)
	}
}

// Config.Spin: a waiter polls the socket for that long before it sleeps,
// and with a negative Spin never polls (no non-blocking read at all).
func TestSpinConfig(t *testing.T) {
	setReadIdle(t, time.Hour) // the waiters keep the token: they read
	for _, spin := range []time.Duration{-1, 0, time.Millisecond} {
		eps := tcpPairConfig(t, func(c *Config) { c.Spin = spin })
		want := spin
		switch {
		case spin == 0:
			want = DefaultSpin
		case spin < 0:
			want = 0
		}
		for _, e := range eps {
			p := e.peers[1-e.rank].Load()
			if got := p.rd.spinner.Begin(time.Now()); got != want {
				t.Errorf("Spin %v: the spinner polls for %v, want %v", spin, got, want)
			}
		}
		// A ping-pong: each rank's waiter reads the other's message
		// itself (readLoop never takes the token back).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var tries [2]uint64
		errs := make(chan error, 2)
		for r, e := range eps {
			go func() {
				buf := make([]byte, 8)
				for i := range 200 {
					if r == 1 || i > 0 {
						if err := e.Irecv(1-r, 1, buf).Wait(ctx); err != nil {
							errs <- err
							return
						}
					}
					if r == 0 || i < 199 {
						if err := e.Isend(1-r, 1, buf).Wait(ctx); err != nil {
							errs <- err
							return
						}
					}
				}
				tries[r] = e.peers[1-r].Load().rd.tries // this goroutine was the reader
				errs <- nil
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("Spin %v: %v", spin, err)
			}
		}
		cancel()
		if polled := tries[0] + tries[1]; (polled > 0) != (want > 0) {
			t.Errorf("Spin %v: %d non-blocking reads, want them only when polling", spin, polled)
		}
	}
}

// A waiter arms its ctx only before a read that may block: one whose ctx
// ends while it polls (here for up to an hour) stops polling, and the
// link stays up for the next receive.
func TestSpinningWaiterCtxEnds(t *testing.T) {
	setReadIdle(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps := tcpPairConfig(t, func(c *Config) { c.Spin = time.Hour })
	buf := make([]byte, 4)
	for i := range 3 {
		short, cancelShort := context.WithTimeout(ctx, 20*time.Millisecond)
		r := eps[1].Irecv(0, 1, buf)
		err := r.Wait(short)
		cancelShort()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: Wait = %v, want DeadlineExceeded", i, err)
		}
		if err := eps[0].Isend(1, 1, []byte{1, 2, 3, byte(i)}).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil || buf[3] != byte(i) {
			t.Fatalf("round %d: after the ctx ended: %v, % x", i, err, buf)
		}
	}
}

// An 8-byte message to a receive posted and waited on, released after,
// allocates nothing: not the inline write, the waiter's reads and polls,
// its ctx (a deadline is armed only before a read that may block) or the
// request (recvReqs).
func TestSmallMessageAllocatesNothing(t *testing.T) {
	setReadIdle(t, time.Hour) // the waiter keeps the token: it reads
	eps := tcpPair(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	src, dst := []byte("12345678"), make([]byte, 8)
	exchange := func() {
		r := eps[1].Irecv(0, 3, dst)
		if err := eps[0].Isend(1, 3, src).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		transport.Release(r)
	}
	for range 100 {
		exchange() // fill the pools, take the token from readLoop
	}
	if n := testing.AllocsPerRun(1000, exchange); n != 0 {
		t.Errorf("%v allocations per message, want 0", n)
	}
	if !bytes.Equal(dst, src) {
		t.Fatalf("received %q, want %q", dst, src)
	}
}
