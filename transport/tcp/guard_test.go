package tcp_test

import (
	"errors"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// closedWithin reads c until the listener closes it, failing the test if
// it is still open after bound; it returns what the listener sent.
func closedWithin(t *testing.T, c net.Conn, bound time.Duration) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(bound))
	got, err := io.ReadAll(c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection from %s still open after %v", c.LocalAddr(), bound)
	}
	return got
}

// TestSilentStrangersClosed: connections that send nothing, or part of a
// hello, are closed once the handshake timeout has passed while the rank
// still waits for its peers, without an answer and with one warn line for
// all; the peers then connect.
func TestSilentStrangersClosed(t *testing.T) {
	const deadline = 200 * time.Millisecond
	j := newStrangerJob(t)
	var logs testutil.Buffer
	j.base.HandshakeTimeout = deadline
	j.base.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	addr2 := j.addr(2)
	var conns []net.Conn
	for i := range 20 {
		c, err := net.Dial("tcp", addr2)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i%2 == 1 {
			c.Write(rawHello(0, 3, j.base.JobID)[:10])
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		if got := closedWithin(t, c, deadline+5*time.Second); len(got) != 0 {
			t.Fatalf("a silent stranger got %d bytes", len(got))
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "no hello within") {
		t.Errorf("want one warn line naming the timeout, got %d:\n%s", n, logs.String())
	}
	j.finish()
}

// TestMaxPendingTCP: with MaxPending connections in their handshake, the
// listener closes the next at once while those stay open; once one goes,
// the real peer gets in.
func TestMaxPendingTCP(t *testing.T) {
	j := newStrangerJob(t)
	j.base.HandshakeTimeout = time.Hour
	j.base.MaxPending = 2
	j.base.Logger = quiet
	addr2 := j.addr(2)
	var waiting []net.Conn
	for range j.base.MaxPending {
		c, err := net.Dial("tcp", addr2)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		waiting = append(waiting, c)
	}
	// The listener accepts in order: the third is over the cap.
	over, err := net.Dial("tcp", addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	closedWithin(t, over, 10*time.Second)
	for i, c := range waiting {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d in its handshake: %v; want it still open", i, err)
		}
	}
	waiting[0].Close()
	waiting[1].Close()
	j.finish()
}
