package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
)

var discardLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// pipeEndpoint makes rank 0 of a 2-rank job whose link to rank 1 is the
// returned raw connection, for feeding it arbitrary bytes.
func pipeEndpoint(t *testing.T) (*endpoint, net.Conn) {
	a, b := net.Pipe()
	cfg := Config{Rank: 0, Size: 2, KV: nil, Logger: discardLogger}
	cfg.defaults()
	cfg.MaxMessage = 1 << 20
	e, err := newEndpoint(&cfg, [][]net.Conn{nil, {a}}, discardLogger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); b.Close() })
	return e, b
}

func TestGarbageFrame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, raw := pipeEndpoint(t)
	r := e.Irecv(1, 7, make([]byte, 4))
	var hdr [headerLen]byte
	binary.LittleEndian.PutUint64(hdr[0:], 7)
	binary.LittleEndian.PutUint64(hdr[8:], 1<<62)
	raw.Write(hdr[:])
	err := r.Wait(ctx)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrProtocol) || !errors.As(err, &pe) || pe.Peer != 1 {
		t.Fatalf("got %v, want PeerError{Peer: 1} wrapping ErrProtocol", err)
	}
	// The link is dropped: sends fail too.
	if err := e.Isend(1, 0, []byte{1}).Wait(ctx); !errors.As(err, &pe) || pe.Peer != 1 {
		t.Fatalf("send after protocol error: %v", err)
	}
}

func TestTruncatedFrame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, raw := pipeEndpoint(t)
	buf := make([]byte, 8)
	r := e.Irecv(1, 7, buf)
	var hdr [headerLen]byte
	binary.LittleEndian.PutUint64(hdr[0:], 7)
	binary.LittleEndian.PutUint64(hdr[8:], 8)
	raw.Write(append(hdr[:], 1, 2, 3))
	raw.Close() // dies mid-payload
	err := r.Wait(ctx)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != 1 {
		t.Fatalf("got %v, want PeerError{Peer: 1} wrapping ErrPeerClosed", err)
	}
}

func TestFrameWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, raw := pipeEndpoint(t)
	s := e.Isend(1, 0x0102, []byte("abc"))
	got := make([]byte, headerLen+3)
	if _, err := io.ReadFull(raw, got); err != nil {
		t.Fatal(err)
	}
	want := []byte{2, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c'}
	if !bytes.Equal(got, want) {
		t.Fatalf("wire % x, want % x", got, want)
	}
	if err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func FuzzReadHello(f *testing.F) {
	cfg := Config{Rank: 1, Size: 2, JobID: "j", Streams: 1}
	h, _ := newHello(&cfg, 0, 0)
	f.Add(h.marshal())
	f.Add([]byte("GCCL"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := readHello(bytes.NewReader(b))
		if err != nil {
			return
		}
		h.check(&cfg)
		if h2, err := readHello(bytes.NewReader(h.marshal())); err != nil || h2 != h {
			t.Fatalf("round trip: %v %+v %+v", err, h, h2)
		}
	})
}
