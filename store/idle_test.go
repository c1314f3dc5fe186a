//go:build linux

package store

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// idleServer starts a server whose connections park after idle without a
// request. Its cleanup closes it and waits for Serve.
func idleServer(t *testing.T, idle time.Duration, opts Options) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(opts)
	srv.idleAfter = idle
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return srv, ln.Addr().String()
}

// waitFor polls cond until it holds, failing the test (with what) if it
// does not within a bound far above what it needs: a wait for an event,
// not a measure of its time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// parks returns how many times a connection has parked at s's poller.
func (s *Server) parks() int64 {
	s.mu.Lock()
	p := s.idle
	s.mu.Unlock()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.parks
}

func (s *Server) numConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// TestParkedRequests: a connection parked at the idle poller gets its
// goroutine back for each new request, round after round, and a Get that
// waits while its connection is parked gets its reply.
func TestParkedRequests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, addr := idleServer(t, time.Millisecond, Options{})
	a := dial(ctx, t, addr)
	defer a.Close()
	b := dial(ctx, t, addr)
	defer b.Close()
	const rounds = 200
	for i := range rounds {
		waitFor(t, "both connections parked", func() bool { return srv.parked() == 2 })
		n, err := a.Add(ctx, "n", 1)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if n != int64(i+1) {
			t.Fatalf("round %d: add returned %d, want %d", i, n, i+1)
		}
	}
	// A Get parked with its connection: b's Set resumes b's connection,
	// and a's reply is written by the Get's own goroutine.
	r0 := srv.Requests()
	got := make(chan error, 1)
	go func() {
		v, err := a.Get(ctx, "later")
		if err == nil && string(v) != "v" {
			err = errors.New("get returned " + string(v))
		}
		got <- err
	}()
	waitFor(t, "the get to wait at the server", func() bool { return srv.parked() == 2 && srv.Requests() == r0+1 })
	if err := b.Set(ctx, "later", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestParkedChurn: with a serving goroutine that parks as soon as it finds
// nothing to read, clients that send one request at a time and clients
// that pipeline many from several goroutines lose no request and get every
// reply: the connections go through the poller over and over.
func TestParkedChurn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv, addr := idleServer(t, time.Microsecond, Options{})
	const clients, goroutines, adds = 4, 3, 100
	var wg sync.WaitGroup
	errs := make(chan error, clients*goroutines)
	for range clients {
		c := dial(ctx, t, addr)
		defer c.Close()
		for range goroutines {
			wg.Go(func() {
				for range adds {
					if _, err := c.Add(ctx, "n", 1); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d parks for %d requests", srv.parks(), clients*goroutines*adds)
	c := dial(ctx, t, addr)
	defer c.Close()
	if n, err := c.Add(ctx, "n", 0); err != nil || n != clients*goroutines*adds {
		t.Fatalf("counter %d %v, want %d", n, err, clients*goroutines*adds)
	}
}

// TestParkedHangUp: a parked connection whose client goes away is ended as
// one with a goroutine is: its ephemeral keys go (what Shrink reads as the
// rank's death), and the server forgets it.
func TestParkedHangUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, addr := idleServer(t, time.Millisecond, Options{})
	a := dial(ctx, t, addr)
	c := dial(ctx, t, addr)
	defer c.Close()
	if err := a.SetEphemeral(ctx, "alive/a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both connections parked", func() bool { return srv.parked() == 2 })
	a.Close()
	waitFor(t, "a's connection ended", func() bool { return srv.numConns() == 1 })
	if v, err := c.CompareSet(ctx, "alive/a", []byte{0}, []byte{0}); err != nil || v != nil {
		t.Fatalf("alive/a outlived its client's parked connection: %q %v", v, err)
	}
}

// TestParkedKill: a parked connection closed by one of its own goroutines
// (a waiting Get whose reply cannot be written) leaves the epoll set
// without an event; kill resumes it, and its goroutine ends it.
func TestParkedKill(t *testing.T) {
	srv, addr := idleServer(t, time.Millisecond, Options{})
	c := rawConn(t, addr)
	if err := c.SetEphemeral("alive/c"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection parked", func() bool { return srv.parked() == 1 })
	srv.mu.Lock()
	p := srv.idle
	srv.mu.Unlock()
	p.mu.Lock()
	var sc *srvConn
	for _, x := range p.conns {
		sc = x
	}
	p.mu.Unlock()
	sc.kill()
	waitFor(t, "the killed connection ended", func() bool { return srv.numConns() == 0 && srv.parked() == 0 })
	if srv.t.numKeys() != 0 {
		t.Fatal("alive/c outlived its killed connection")
	}
	c.expectClosed(t)
}

// TestCloseParked: Close with connections parked returns, closes them, and
// leaves no goroutine behind (the poller's included).
func TestCloseParked(t *testing.T) {
	g0 := runtime.NumGoroutine()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{})
	srv.idleAfter = time.Millisecond
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(context.Background(), ln) }()
	const n = 20
	cs := make([]*raw, n)
	for i := range cs {
		cs[i] = rawConn(t, ln.Addr().String())
		if err := cs[i].SetEphemeral("k"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every connection parked", func() bool { return srv.parked() == n })
	srv.Close()
	<-served
	for _, c := range cs {
		c.expectClosed(t)
	}
	waitFor(t, "the server's goroutines to end", func() bool { return runtime.NumGoroutine() <= g0 })
	if srv.t.numKeys() != 0 {
		t.Fatalf("%d ephemeral keys outlived Close", srv.t.numKeys())
	}
}

// raw is a client without goroutines: a bare socket that speaks the wire
// protocol one request at a time.
type raw struct {
	c  net.Conn
	br *bufio.Reader
	id uint64
}

func rawConn(t *testing.T, addr string) *raw {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := &raw{c: c, br: bufio.NewReader(c)}
	if m, err := readMsg(r.br, 1<<20); err != nil || m.op != opHello {
		t.Fatalf("hello: %v %v", m.op, err)
	}
	return r
}

// SetEphemeral sets key as the connection's ephemeral key.
func (r *raw) SetEphemeral(key string) error {
	r.id++
	if _, err := r.c.Write(appendMsg(nil, &msg{op: opEphemeral, id: r.id, args: [][]byte{[]byte(key), []byte("1")}})); err != nil {
		return err
	}
	m, err := readMsg(r.br, 1<<20)
	if err == nil && m.op != opOK {
		err = remoteError(m)
	}
	return err
}

// expectClosed reads until the server closes the connection.
func (r *raw) expectClosed(t *testing.T) {
	t.Helper()
	r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := r.br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("want the server's close, got %v", err)
	}
}

// wrapped hides a connection's type, as a TLS or user wrapper would.
type wrapped struct{ net.Conn }

type wrapListener struct{ net.Listener }

func (l wrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return wrapped{c}, nil
}

// TestNotParked: a connection that cannot park (a wrapped one, which may
// hold bytes its descriptor no longer shows; or any, once the poller could
// not be made) keeps its goroutine, and its requests after an idle spell
// are served. The sleeps only give the idle spell a chance to pass: the
// test passes however long they take.
func TestNotParked(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap bool
	}{{"wrapped", true}, {"no poller", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var ln net.Listener
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			if tc.wrap {
				ln = wrapListener{ln}
			}
			srv := NewServer(Options{})
			srv.idleAfter = time.Millisecond
			srv.noIdle = !tc.wrap
			done := make(chan struct{})
			go func() { defer close(done); srv.Serve(ctx, ln) }()
			defer func() { srv.Close(); <-done }()
			c := dial(ctx, t, addr)
			defer c.Close()
			for i := range 5 {
				time.Sleep(10 * time.Millisecond)
				if n, err := c.Add(ctx, "n", 1); err != nil || n != int64(i+1) {
					t.Fatalf("add %d: %d %v", i, n, err)
				}
			}
			if n := srv.parked(); n != 0 {
				t.Fatalf("%d connections parked", n)
			}
		})
	}
}

// TestParkedLastRequest: a request that a client sends just before it
// hangs up, while its connection is parked, is served before the hang-up
// ends the connection, as it was with a goroutine per connection.
func TestParkedLastRequest(t *testing.T) {
	srv, addr := idleServer(t, time.Millisecond, Options{})
	c := rawConn(t, addr)
	if err := c.SetEphemeral("alive/c"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection parked", func() bool { return srv.parked() == 1 })
	if _, err := c.c.Write(appendMsg(nil, &msg{op: opSet, id: 9, args: [][]byte{[]byte("last"), []byte("words")}})); err != nil {
		t.Fatal(err)
	}
	c.c.Close()
	waitFor(t, "the connection ended", func() bool { return srv.numConns() == 0 })
	if srv.t.numKeys() != 1 {
		t.Fatalf("%d keys, want only the last request's", srv.t.numKeys())
	}
	v, err := srv.t.wait(context.Background(), "last")
	if err != nil || string(v) != "words" {
		t.Fatalf("last: %q %v", v, err)
	}
}

// dial connects a client to addr, failing t if it cannot.
func dial(ctx context.Context, t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(ctx, addr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
