package store

import (
	"bufio"
	"context"
	"errors"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// guardedServer serves opts on a loopback port until the test ends.
func guardedServer(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	srv := NewServer(opts)
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return srv, ln.Addr().String()
}

// readUntilClosed reads c until the server closes it and returns what
// came; it fails the test if c is still open after bound.
func readUntilClosed(t *testing.T, c net.Conn, bound time.Duration) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(bound))
	got, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %v (read %d bytes)", bound, len(got))
	}
	return got
}

// TestHandshakeDeadline: with or without a secret, a connection that
// sends nothing is closed once the handshake timeout has passed, while a
// client that authenticated (or, without a secret, greeted on Dial) may
// stay idle for longer and wait in a Get for longer.
func TestHandshakeDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	for _, secret := range [][]byte{nil, []byte("s")} {
		t.Run("secret="+strconv.FormatBool(secret != nil), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, addr := guardedServer(t, Options{Secret: secret, HandshakeTimeout: deadline})
			raw, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			cl, err := Dial(ctx, addr, Options{Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			// Closed by the deadline, polled with a generous bound.
			hello := readUntilClosed(t, raw, deadline+5*time.Second)
			if m, err := readMsg(bufio.NewReader(strings.NewReader(string(hello))), DefaultMaxMessage); err != nil || m.op != opHello {
				t.Fatalf("the silent connection got %q (%v), want the hello alone", hello, err)
			}
			// The client has been idle as long: it still works, and a Get
			// may wait past the deadline.
			time.Sleep(deadline)
			go func() {
				time.Sleep(2 * deadline)
				c2, err := Dial(ctx, addr, Options{Secret: secret})
				if err != nil {
					t.Error(err)
					return
				}
				defer c2.Close()
				c2.Set(ctx, "k", []byte("v"))
			}()
			if v, err := cl.Get(ctx, "k"); err != nil || string(v) != "v" {
				t.Fatalf("Get = %q, %v", v, err)
			}
		})
	}
}

// TestPreAuthLimit: before authentication, a frame over MaxPreAuthMessage
// is refused with an error that says so, with or without a secret, while
// an authenticated client still sends large values.
func TestPreAuthLimit(t *testing.T) {
	for _, secret := range [][]byte{nil, []byte("s")} {
		t.Run("secret="+strconv.FormatBool(secret != nil), func(t *testing.T) {
			var logs testutil.Buffer
			_, addr := guardedServer(t, Options{Secret: secret, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			if _, err := readMsg(br, DefaultMaxMessage); err != nil {
				t.Fatal(err)
			}
			c.Write(appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("k"), make([]byte, MaxPreAuthMessage)}}))
			r, err := readMsg(br, DefaultMaxMessage)
			if err != nil {
				t.Fatal(err)
			}
			if err := remoteError(r); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "before authentication") {
				t.Fatalf("reply: %v; want a protocol error naming the limit before authentication", err)
			}
			if _, err := readMsg(br, DefaultMaxMessage); err == nil {
				t.Fatal("the connection stayed open")
			}
			if !strings.Contains(logs.String(), "too_large") {
				t.Errorf("refusal not logged:\n%s", logs.String())
			}
			cl, err := Dial(context.Background(), addr, Options{Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if err := cl.Set(context.Background(), "big", make([]byte, 1<<20)); err != nil {
				t.Fatalf("a large Set once authenticated: %v", err)
			}
		})
	}
}

// TestMaxPending: with MaxPending connections waiting to authenticate,
// the next is closed at once, without a hello, while those waiting stay
// open; once one of them goes, a client gets in.
func TestMaxPending(t *testing.T) {
	const max = 3
	_, addr := guardedServer(t, Options{Secret: []byte("s"), MaxPending: max, HandshakeTimeout: time.Hour})
	var waiting []net.Conn
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := readMsg(bufio.NewReader(c), DefaultMaxMessage); err != nil {
			t.Fatalf("a connection under the cap got no hello: %v", err)
		}
		waiting = append(waiting, c)
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if got := readUntilClosed(t, over, 10*time.Second); len(got) != 0 {
		t.Fatalf("the connection over the cap got %d bytes, want none", len(got))
	}
	for i, c := range waiting {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("waiting connection %d: %v; want it still open", i, err)
		}
	}
	waiting[0].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := Dial(ctx, addr, Options{Secret: []byte("s")})
	if err != nil {
		t.Fatalf("Dial once a slot is free: %v", err)
	}
	cl.Close()
}

func TestParseHandshakeTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"5s": 5 * time.Second, "300ms": 300 * time.Millisecond, "2": 2 * time.Second, "0.5": 500 * time.Millisecond} {
		if got, err := ParseHandshakeTimeout(in); err != nil || got != want {
			t.Errorf("ParseHandshakeTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1s", "soon", "NaN", "1e300"} {
		if _, err := ParseHandshakeTimeout(in); err == nil || !strings.Contains(err.Error(), EnvHandshakeTimeout) {
			t.Errorf("ParseHandshakeTimeout(%q): err = %v, want one naming %s", in, err, EnvHandshakeTimeout)
		}
	}
}
