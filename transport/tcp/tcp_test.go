package tcp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
	"github.com/goccl/goccl/transport/transporttest"
)

var jobSeq atomic.Int64

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// connectAll runs Connect for every rank on goroutines of this process.
func connectAll(ctx context.Context, size int, base tcp.Config) ([]transport.Endpoint, error) {
	if base.KV == nil {
		base.KV = testutil.NewKV()
	}
	if base.JobID == "" {
		base.JobID = fmt.Sprintf("job-%d", jobSeq.Add(1))
	}
	if base.ListenHost == "" {
		base.ListenHost = "127.0.0.1"
	}
	if base.Logger == nil {
		base.Logger = quiet
	}
	eps := make([]transport.Endpoint, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			cfg := base
			cfg.Rank, cfg.Size = r, size
			eps[r], errs[r] = tcp.Connect(ctx, cfg)
			if errs[r] != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, errs[r])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, ep := range eps {
			if ep != nil {
				ep.Close()
			}
		}
		return nil, err
	}
	return eps, nil
}

func meshFunc(base tcp.Config) transporttest.MeshFunc {
	return func(t *testing.T, size int) []transport.Endpoint {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		eps, err := connectAll(ctx, size, base)
		if err != nil {
			t.Fatal(err)
		}
		return eps
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, meshFunc(tcp.Config{}))
}

func TestConformanceStreams(t *testing.T) {
	transporttest.Run(t, meshFunc(tcp.Config{Streams: 3, Secret: []byte("s3cret")}))
}

// With GOMAXPROCS 1 Isend writes large messages inline too (but striped
// ones through sendLoop), the rest of a partial write going to sendLoop:
// the suite again, with a socket buffer small enough for partial writes.
func TestConformanceGOMAXPROCS1(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	t.Run("one stream", func(t *testing.T) {
		transporttest.Run(t, meshFunc(tcp.Config{SocketBuffer: 64 << 10}))
	})
	t.Run("streams", func(t *testing.T) {
		transporttest.Run(t, meshFunc(tcp.Config{Streams: 3, SocketBuffer: 64 << 10}))
	})
}

func TestStripedSizes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps, err := connectAll(ctx, 2, tcp.Config{Streams: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer eps[0].Close()
	defer eps[1].Close()
	for _, n := range []int{tcp.DefaultStripeMin - 1, tcp.DefaultStripeMin, tcp.DefaultStripeMin + 3, 3<<20 + 1} {
		want := bytes.Repeat([]byte{byte(n), 1, 2}, n/3+1)[:n]
		for _, postFirst := range []bool{true, false} {
			got := make([]byte, n)
			var r transport.Request
			if postFirst {
				r = eps[1].Irecv(0, 1, got)
			}
			s := eps[0].Isend(1, 1, want)
			if !postFirst {
				r = eps[1].Irecv(0, 1, got)
			}
			if err := r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("n=%d: payload differs", n)
			}
		}
		// Mismatch on a striped message keeps the streams in step.
		s := eps[0].Isend(1, 2, want)
		if err := eps[1].Irecv(0, 2, make([]byte, n+1)).Wait(ctx); !errors.Is(err, transport.ErrProtocol) {
			t.Fatalf("mismatch: %v", err)
		}
		s.Wait(ctx)
	}
}

// TestHandshakeRefused: a rank with the wrong secret or job id cannot join;
// the legitimate rank, arriving later, still can.
func TestHandshakeRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*tcp.Config)
		inLog  string
	}{
		{"WrongSecret", func(c *tcp.Config) { c.Secret = []byte("guess") }, "authentication"},
		{"NoSecret", func(c *tcp.Config) { c.Secret = nil }, "authentication"},
		{"WrongJob", func(c *tcp.Config) { c.JobID = "other-job" }, "job id"},
		{"WrongSize", func(c *tcp.Config) { c.Size = 3 }, "job size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var logs testutil.Buffer
			kv := testutil.NewKV()
			base := tcp.Config{Size: 2, JobID: "job", KV: kv, ListenHost: "127.0.0.1",
				Secret: []byte("right"), Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			// Rank 1 waits for rank 0.
			type result struct {
				ep  transport.Endpoint
				err error
			}
			res1 := make(chan result, 1)
			go func() {
				cfg := base
				cfg.Rank = 1
				ep, err := tcp.Connect(ctx, cfg)
				res1 <- result{ep, err}
			}()
			// The impostor claims rank 0 and gives up after a while.
			bad := base
			bad.Rank = 0
			bad.InitTimeout = 300 * time.Millisecond
			tc.modify(&bad)
			if bad.Size != base.Size {
				bad.Rank = 0
			}
			if ep, err := tcp.Connect(ctx, bad); err == nil {
				ep.Close()
				t.Fatal("impostor connected")
			}
			// Now the real rank 0 (the KV already holds rank 1's address).
			good := base
			good.Rank = 0
			ep0, err := tcp.Connect(ctx, good)
			if err != nil {
				t.Fatalf("legitimate rank 0: %v", err)
			}
			defer ep0.Close()
			r := <-res1
			if r.err != nil {
				t.Fatalf("rank 1: %v", r.err)
			}
			defer r.ep.Close()
			got := make([]byte, 2)
			rq := r.ep.Irecv(0, 0, got)
			if err := ep0.Isend(1, 0, []byte("ok")).Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rq.Wait(ctx); err != nil || string(got) != "ok" {
				t.Fatalf("%v %q", err, got)
			}
			if !strings.Contains(logs.String(), "refused") || !strings.Contains(logs.String(), tc.inLog) {
				t.Fatalf("refusal not logged with %q:\n%s", tc.inLog, logs.String())
			}
		})
	}
}

// TestStrangerAndGarbage: a raw connection that sends junk during the
// handshake is refused; junk on an established link is a protocol error
// naming the peer.
func TestStrangerGarbage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv := testutil.NewKV()
	var logs testutil.Buffer
	base := tcp.Config{Size: 2, JobID: "job", KV: kv, ListenHost: "127.0.0.1",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	res1 := make(chan error, 1)
	var ep1 transport.Endpoint
	go func() {
		cfg := base
		cfg.Rank = 1
		var err error
		ep1, err = tcp.Connect(ctx, cfg)
		res1 <- err
	}()
	addr, err := kv.Get(ctx, tcp.AddrKey(1))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	io.Copy(io.Discard, c) // refused: the server closes
	c.Close()

	cfg := base
	cfg.Rank = 0
	ep0, err := tcp.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ep0.Close()
	if err := <-res1; err != nil {
		t.Fatal(err)
	}
	defer ep1.Close()
	if !strings.Contains(logs.String(), "bad magic") {
		t.Fatalf("stranger not logged:\n%s", logs.String())
	}
}

func TestConnectTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := tcp.Config{Rank: 0, Size: 2, JobID: "lonely", KV: testutil.NewKV(), ListenHost: "127.0.0.1",
		Logger: quiet, InitTimeout: 100 * time.Millisecond}
	_, err := tcp.Connect(ctx, cfg)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, ccancel)
	cfg.Rank = 1
	if _, err := tcp.Connect(cctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want Canceled", err)
	}
	for _, bad := range []tcp.Config{{Rank: 0, Size: 0, KV: cfg.KV}, {Rank: 2, Size: 2, KV: cfg.KV}, {Rank: 0, Size: 1}} {
		if _, err := tcp.Connect(ctx, bad); err == nil {
			t.Fatalf("config %+v accepted", bad)
		}
	}
}
