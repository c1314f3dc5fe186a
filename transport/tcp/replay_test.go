package tcp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/goccl/goccl/internal/testutil"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// Sizes on the wire of the handshake, from its description in
// handshake.go: a hello is 20 fixed bytes, the job id and a 32-byte nonce;
// a MAC is 32 bytes; the acceptance is one byte 1.
func helloLen(job string) int { return 20 + len(job) + 32 }

const (
	macLen   = 32
	accepted = 1
)

// TestHandshakeReplayRefused: the bytes a legitimate rank sent during a
// successful handshake, recorded by a proxy on the way and sent again on a
// new connection to the same listener, are refused, because the server's
// fresh nonce makes the recorded MAC worthless; the refusal is logged and
// the job goes on.
func TestHandshakeReplayRefused(t *testing.T) {
	j := newStrangerJob(t)
	// Rank 0 reaches rank 2 through a proxy that records both directions.
	addr2 := j.addr(2)
	px := newProxy(t, addr2)
	cfg0 := j.base
	cfg0.Rank = 0
	cfg0.KV = redirectKV{KV: j.base.KV, key: tcp.AddrKey(2), addr: px.ln.Addr().String()}
	j.start(cfg0)
	client, server := px.handshake(t, j.ctx, j.base.JobID)

	c, err := net.Dial("tcp", addr2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	remote := c.LocalAddr().String()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(client); err != nil {
		t.Fatalf("replay: %v", err)
	}
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the replayed connection open (read %d bytes)", len(got))
	}
	n := helloLen(j.base.JobID)
	if len(got) > n+macLen && got[n+macLen] == accepted {
		t.Fatalf("the replayed handshake was accepted")
	}
	if len(got) >= n && bytes.Equal(got[:n], server[:n]) {
		t.Errorf("the server sent the same hello (and nonce) again")
	}
	j.refusalLogged(remote, "client failed authentication")
	j.finish()
}

// TestHandshakeDuplicateRefused: a second process that holds the secret
// and claims a rank that is already connected is refused and logged; the
// job goes on.
func TestHandshakeDuplicateRefused(t *testing.T) {
	j := newStrangerJob(t)
	// Rank 0 reaches rank 2 through a proxy, which shows when that link
	// is up.
	px := newProxy(t, j.addr(2))
	cfg0 := j.base
	cfg0.Rank = 0
	cfg0.KV = redirectKV{KV: j.base.KV, key: tcp.AddrKey(2), addr: px.ln.Addr().String()}
	j.start(cfg0)
	px.handshake(t, j.ctx, j.base.JobID)
	// A second rank 0 dials rank 2 directly, passes authentication, and
	// finds the slot taken. It gives up after a second.
	dup := j.base
	dup.Rank = 0
	dup.InitTimeout = time.Second
	dup.Logger = quiet
	if ep, err := tcp.Connect(j.ctx, dup); err == nil {
		ep.Close()
		t.Fatal("a second rank 0 joined the job")
	}
	j.refusalLogged("", "duplicate connection from rank 0")
	j.finish()
}

// TestHandshakeRankRefused: a hello that claims a rank out of range (the
// job size, or -1 as the uint32 on the wire), or a rank that the server
// must dial rather than be dialled by (its own rank), is refused before
// the server sends anything, and logged; the job goes on.
func TestHandshakeRankRefused(t *testing.T) {
	j := newStrangerJob(t)
	addr2 := j.addr(2)
	for _, tc := range []struct {
		name  string
		rank  uint32
		inLog string
	}{
		{"size", 3, "rank 3 out of range"},
		{"negative", 1<<32 - 1, fmt.Sprintf("rank %d out of range", uint32(1<<32-1))},
		{"self", 2, "rank 2 must be dialled by rank 2"},
	} {
		c, err := net.Dial("tcp", addr2)
		if err != nil {
			t.Fatal(err)
		}
		remote := c.LocalAddr().String()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(rawHello(tc.rank, 3, j.base.JobID))
		got, err := io.ReadAll(c)
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the server kept the connection open", tc.name)
		}
		if len(got) > 0 {
			t.Errorf("%s: the server answered %d bytes to a hello it must refuse", tc.name, len(got))
		}
		j.refusalLogged(remote, tc.inLog)
	}
	cfg0 := j.base
	cfg0.Rank = 0
	j.start(cfg0)
	j.finish()
}

// TestHandshakeNoMACRefused: a client that sends its hello, reads the
// server's hello and MAC, and then sends no MAC of its own is refused
// without the acceptance byte and logged, and the job goes on:
//
//   - close: it closes its write side at once (the server reads EOF);
//   - half: it sends half a MAC, then closes its write side;
//   - stall: it sends nothing more and keeps the connection open; the
//     server must drop it once its handshake timeout has passed
//     (strangerHandshake here), while the real ranks are not yet there,
//     then the real ranks connect;
//   - stall-join: the same stranger, but the real ranks connect while it
//     stalls: they must not wait for it, and the server drops it as soon as
//     its Connect has every link.
//
// The stranger claims rank 0, a rank the server (rank 2) accepts from and
// whose slot is still free, so only the missing MAC can refuse it.
func TestHandshakeNoMACRefused(t *testing.T) {
	const margin = 2 * time.Second
	for _, tc := range []struct {
		name  string
		after func(c *net.TCPConn) // what the client does after the server's MAC
		join  bool                 // the real ranks connect while the stranger waits
		inLog string
		max   time.Duration // the refusal must come within this, from the server's MAC
	}{
		{"close", func(c *net.TCPConn) { c.CloseWrite() }, false, "no client authentication: EOF", margin},
		{"half", func(c *net.TCPConn) { c.Write(make([]byte, macLen/2)); c.CloseWrite() }, false,
			"no client authentication: unexpected EOF", margin},
		{"stall", func(*net.TCPConn) {}, false, "no client authentication", strangerHandshake + margin},
		{"stall-join", func(*net.TCPConn) {}, true, "no client authentication", strangerHandshake},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newStrangerJob(t)
			addr2 := j.addr(2)
			d, err := net.Dial("tcp", addr2)
			if err != nil {
				t.Fatal(err)
			}
			c := d.(*net.TCPConn)
			defer c.Close()
			remote := c.LocalAddr().String()
			c.SetDeadline(time.Now().Add(strangerHandshake + 2*margin))
			if _, err := c.Write(rawHello(0, 3, j.base.JobID)); err != nil {
				t.Fatalf("hello: %v", err)
			}
			// The server answers with its hello and MAC, then waits for ours.
			if _, err := io.ReadFull(c, make([]byte, helloLen(j.base.JobID)+macLen)); err != nil {
				t.Fatalf("the server did not answer a valid hello: %v", err)
			}
			start := time.Now()
			tc.after(c)
			if tc.join {
				j.finish() // rank 2's Connect cannot end while it counts on the stranger
			}
			got, err := io.ReadAll(c)
			took := time.Since(start)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the server kept the connection open for %v", took)
			}
			if len(got) > 0 {
				t.Errorf("the server sent %d more bytes (% x) to a client that sent no MAC", len(got), got)
			}
			if took > tc.max {
				t.Errorf("the server dropped the connection after %v, want at most %v", took, tc.max)
			}
			j.refusalLogged(remote, tc.inLog)
			if !tc.join {
				j.finish()
			}
		})
	}
}

// strangerJob is a 3-rank job with a secret, its ranks started one by one
// so that strangers can knock in between; every Connect ends with the
// test.
type strangerJob struct {
	t       *testing.T
	ctx     context.Context
	base    tcp.Config
	logs    *testutil.Buffer
	started [3]bool
	res     [3]chan connectResult
}

type connectResult struct {
	ep  transport.Endpoint
	err error
}

// strangerHandshake is the handshake timeout of the jobs strangers try:
// short, so that a stalled stranger is dropped quickly.
const strangerHandshake = time.Second

func newStrangerJob(t *testing.T) *strangerJob {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	logs := new(testutil.Buffer)
	j := &strangerJob{t: t, ctx: ctx, logs: logs, base: tcp.Config{
		Size: 3, JobID: fmt.Sprintf("job-%d", jobSeq.Add(1)), KV: testutil.NewKV(), ListenHost: "127.0.0.1",
		Secret: []byte("right"), Logger: slog.New(slog.NewTextHandler(logs, nil)),
		HandshakeTimeout: strangerHandshake,
	}}
	for r := range j.res {
		j.res[r] = make(chan connectResult, 1)
	}
	t.Cleanup(func() {
		cancel() // a Connect still waiting gives up
		for r, ch := range j.res {
			if !j.started[r] {
				continue
			}
			if cr, ok := <-ch; ok && cr.ep != nil {
				cr.ep.Close()
			}
		}
	})
	return j
}

// start runs Connect for cfg.Rank in the background.
func (j *strangerJob) start(cfg tcp.Config) {
	j.started[cfg.Rank] = true
	go func() {
		ep, err := tcp.Connect(j.ctx, cfg)
		j.res[cfg.Rank] <- connectResult{ep, err}
		close(j.res[cfg.Rank])
	}()
}

// addr starts rank r (with the base configuration) and returns the
// address it listens on.
func (j *strangerJob) addr(r int) string {
	j.t.Helper()
	cfg := j.base
	cfg.Rank = r
	j.start(cfg)
	v, err := j.base.KV.Get(j.ctx, tcp.AddrKey(r))
	if err != nil {
		j.t.Fatal(err)
	}
	return string(v)
}

// refusalLogged waits up to 5 s for the log line of a refused connection
// from remote ("": from anywhere) with reason.
func (j *strangerJob) refusalLogged(remote, reason string) {
	j.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.Split(j.logs.String(), "\n") {
			if strings.Contains(line, "refused connection") && strings.Contains(line, "remote="+remote) &&
				strings.Contains(line, reason) {
				return
			}
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("no refusal of %s with %q in the log:\n%s", remote, reason, j.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish starts the ranks not yet started, waits for every Connect, and
// checks that a message goes each way between every pair.
func (j *strangerJob) finish() {
	j.t.Helper()
	for r, ok := range j.started {
		if !ok {
			cfg := j.base
			cfg.Rank = r
			j.start(cfg)
		}
	}
	eps := make([]transport.Endpoint, len(j.res))
	for r, ch := range j.res {
		cr := <-ch
		if cr.ep != nil {
			j.t.Cleanup(func() { cr.ep.Close() })
		}
		if cr.err != nil {
			j.t.Fatalf("rank %d: %v\nlog:\n%s", r, cr.err, j.logs.String())
		}
		eps[r] = cr.ep
	}
	for from := range eps {
		for to := range eps {
			if from == to {
				continue
			}
			want := fmt.Appendf(nil, "%d->%d", from, to)
			got := make([]byte, len(want))
			rq := eps[to].Irecv(from, 9, got)
			if err := eps[from].Isend(to, 9, want).Wait(j.ctx); err != nil {
				j.t.Fatalf("send %s: %v", want, err)
			}
			if err := rq.Wait(j.ctx); err != nil || !bytes.Equal(got, want) {
				j.t.Fatalf("receive %s: %v, got %q", want, err, got)
			}
		}
	}
}

// rawHello is a client hello (see handshake.go) claiming rank of a job of
// size ranks with one stream, and a random nonce.
func rawHello(rank, size uint32, job string) []byte {
	b := []byte("GCCL")
	b = binary.LittleEndian.AppendUint16(b, 1) // version
	b = binary.LittleEndian.AppendUint16(b, 1) // streams
	b = binary.LittleEndian.AppendUint32(b, rank)
	b = binary.LittleEndian.AppendUint32(b, size)
	b = binary.LittleEndian.AppendUint16(b, 0) // stream
	b = binary.LittleEndian.AppendUint16(b, uint16(len(job)))
	b = append(b, job...)
	nonce := make([]byte, 32)
	rand.Read(nonce)
	return append(b, nonce...)
}

// redirectKV answers Get(key) with addr and passes everything else on.
type redirectKV struct {
	tcp.KV
	key, addr string
}

func (k redirectKV) Get(ctx context.Context, key string) ([]byte, error) {
	if key == k.key {
		return []byte(k.addr), nil
	}
	return k.KV.Get(ctx, key)
}

// proxy forwards every connection it accepts to target and records both
// directions of the first one.
type proxy struct {
	ln       net.Listener
	mu       sync.Mutex
	up, down []byte // client to server, server to client
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln}
	p.wg.Go(func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			var up, down *[]byte
			if first {
				up, down = &p.up, &p.down
			}
			p.wg.Go(func() { p.pipe(s, c, up) })
			p.wg.Go(func() { p.pipe(c, s, down) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// pipe copies src to dst, appending what passes to rec when it is not
// nil, and closes both when either side ends.
func (p *proxy) pipe(dst, src net.Conn, rec *[]byte) {
	defer dst.Close()
	defer src.Close()
	b := make([]byte, 32<<10)
	for {
		n, err := src.Read(b)
		if n > 0 {
			if rec != nil {
				p.mu.Lock()
				*rec = append(*rec, b[:n]...)
				p.mu.Unlock()
			}
			if _, err := dst.Write(b[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// handshake waits until the first connection's handshake has been
// accepted and returns what each side sent during it: the client's hello
// and MAC, the server's hello and MAC.
func (p *proxy) handshake(t *testing.T, ctx context.Context, job string) (client, server []byte) {
	t.Helper()
	n := helloLen(job) + macLen
	for {
		p.mu.Lock()
		if len(p.up) >= n && len(p.down) > n {
			if p.down[n] != accepted {
				p.mu.Unlock()
				t.Fatalf("the legitimate handshake was not accepted: % x", p.down)
			}
			client, server = bytes.Clone(p.up[:n]), bytes.Clone(p.down[:n])
			p.mu.Unlock()
			return client, server
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			t.Fatalf("no handshake through the proxy: %v", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
