package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/transport"
)

// Connect joins the mesh: it listens, publishes its address in cfg.KV,
// connects to every other rank (the lower rank of each pair dials, with
// retry and backoff), authenticates each connection, and returns the
// endpoint once every link is up. Connections that fail the handshake
// (stranger, wrong secret, wrong job, duplicate or out-of-range rank) are
// refused, logged, and Connect keeps waiting for the legitimate peer. It
// gives up when ctx ends or cfg.InitTimeout passes, closing what it opened.
// With cfg.Lazy (and one stream) it links only the ring neighbours before
// it returns, and any other pair when its first message is sent (lazy.go).
func Connect(ctx context.Context, cfg Config) (transport.Endpoint, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.defaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.InitTimeout)
	defer cancel()
	log := cfg.Logger.With("rank", cfg.Rank, "job", cfg.JobID)
	if cfg.Lazy && cfg.Streams == 1 {
		return connectLazy(ctx, &cfg, log)
	}
	cfg.Lazy = false // several streams: every pair now, the lower rank dialing

	host, err := cfg.listenHost()
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d listen: %w", cfg.Rank, err)
	}
	defer ln.Close()
	if err := cfg.KV.Set(ctx, AddrKey(cfg.Rank), []byte(ln.Addr().String())); err != nil {
		return nil, fmt.Errorf("tcp: rank %d publish address: %w", cfg.Rank, err)
	}

	t := &table{conns: make([][]net.Conn, cfg.Size)}
	for p := range t.conns {
		if p != cfg.Rank {
			t.conns[p] = make([]net.Conn, cfg.Streams)
			t.missing += cfg.Streams
		}
	}
	t.all = make(chan struct{})
	if t.missing == 0 {
		close(t.all)
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var wg sync.WaitGroup

	// Accept from lower ranks.
	if cfg.Rank > 0 {
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		wg.Go(func() { acceptLoop(ctx, ln, &cfg, t, log, &wg) })
	}
	// Dial higher ranks.
	for p := cfg.Rank + 1; p < cfg.Size; p++ {
		wg.Go(func() {
			if err := dialPeer(ctx, &cfg, p, t, log); err != nil {
				fail(err)
			}
		})
	}

	select {
	case <-t.all:
	case <-ctx.Done():
	}
	ln.Close()
	fail(nil) // stop stragglers (no-op when everything is connected)
	wg.Wait()

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.missing > 0 {
		t.closeAll()
		err := context.Cause(ctx)
		var missing []int
		for p, cs := range t.conns {
			for _, c := range cs {
				if c == nil && p != cfg.Rank {
					missing = append(missing, p)
					break
				}
			}
		}
		if t.lastErr != nil {
			err = fmt.Errorf("%w (last error: %v)", err, t.lastErr)
		}
		return nil, fmt.Errorf("tcp: rank %d connect: no link to ranks %v: %w", cfg.Rank, missing, err)
	}
	return newEndpoint(&cfg, t.conns, log)
}

// table collects the connections as they come up.
type table struct {
	mu      sync.Mutex
	conns   [][]net.Conn // [peer][stream]
	missing int
	all     chan struct{}
	lastErr error
	closed  bool
}

// add registers c; it fails if the slot is taken or Connect gave up.
func (t *table) add(peer, stream int, c net.Conn) error {
	if err := t.reserve(peer, stream, c); err != nil {
		return err
	}
	t.commit()
	return nil
}

// reserve claims the slot of (peer, stream) for c without counting it yet,
// so that Connect does not finish (and cancel the handshakes still running)
// before c's handshake has sent its last byte.
func (t *table) reserve(peer, stream int, c net.Conn) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("connect finished")
	}
	if t.conns[peer][stream] != nil {
		return fmt.Errorf("%w: duplicate connection from rank %d stream %d", errRefused, peer, stream)
	}
	t.conns[peer][stream] = c
	return nil
}

// unreserve frees a slot whose handshake failed after reserve.
func (t *table) unreserve(peer, stream int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.conns[peer][stream] = nil
	}
}

func (t *table) commit() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.missing--
	if t.missing == 0 {
		close(t.all)
	}
}

func (t *table) noteErr(err error) {
	t.mu.Lock()
	t.lastErr = err
	t.mu.Unlock()
}

// closeAll closes the connections; t.mu is held.
func (t *table) closeAll() {
	t.closed = true
	for _, cs := range t.conns {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}
}

func acceptLoop(ctx context.Context, ln net.Listener, cfg *Config, t *table, log *slog.Logger, wg *sync.WaitGroup) {
	var refused refusals
	defer refused.flush(log)
	var pending atomic.Int64 // connections in their handshake
	for {
		c, err := ln.Accept()
		if err != nil {
			return // listener closed: done or given up
		}
		if cfg.MaxPending > 0 && pending.Load() >= int64(cfg.MaxPending) {
			// Close it at once rather than leave it in the listen backlog,
			// which would fill and hold the real peers back too; they
			// retry.
			remote := c.RemoteAddr().String()
			c.Close()
			refused.note(log, refusedOverCap, remote, fmt.Errorf("%d connections already in their handshake", cfg.MaxPending))
			continue
		}
		pending.Add(1)
		if cfg.TLS != nil {
			c = tls.Server(c, cfg.TLS) // the TLS handshake runs under the handshake deadline
		}
		wg.Go(func() {
			defer pending.Add(-1) // once c is closed or handed over
			remote := c.RemoteAddr().String()
			hctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
			defer cancel()
			stop := context.AfterFunc(hctx, func() { c.SetDeadline(time.Unix(1, 0)) })
			reserved := false
			rank, stream, err := serverHandshake(c, cfg, func(rank, stream int) error {
				err := t.reserve(rank, stream, c)
				reserved = err == nil
				return err
			})
			stop()
			if err != nil {
				if reserved {
					t.unreserve(rank, stream)
				}
				c.Close()
				if rank < 0 {
					// A stranger: no well-formed hello. What it sent is
					// noted even if Connect has ended meanwhile: this
					// goroutine may run only after the last link is up
					// (TestStrangerGarbage lost its log line that way,
					// once in a CI run under the race detector).
					switch {
					case errors.Is(err, errRefused) || isTLSError(err):
						refused.note(log, refusedGarbage, remote, err)
					case ctx.Err() != nil:
						// Cut off because Connect is over; nothing to report.
						log.Debug("tcp: dropped a connection in its hello as Connect ended", "remote", remote, "err", err)
					case errors.Is(hctx.Err(), context.DeadlineExceeded):
						refused.note(log, refusedSilent, remote, fmt.Errorf("no hello within %v", cfg.HandshakeTimeout))
					default:
						refused.note(log, refusedClosed, remote, err)
					}
					return
				}
				log.Warn("tcp: refused connection", "remote", remote, "peer", rank, "stream", stream, "err", err)
				t.noteErr(err)
				return
			}
			c.SetDeadline(time.Time{})
			t.commit()
		})
	}
}

// isTLSError reports whether err comes from a failed TLS handshake rather
// than from the connection.
func isTLSError(err error) bool {
	var (
		re tls.RecordHeaderError
		ae tls.AlertError
		ce *tls.CertificateVerificationError
	)
	return errors.As(err, &re) || errors.As(err, &ae) || errors.As(err, &ce)
}

func dialPeer(ctx context.Context, cfg *Config, peer int, t *table, log *slog.Logger) error {
	v, err := cfg.KV.Get(ctx, AddrKey(peer))
	if err != nil {
		return fmt.Errorf("tcp: rank %d: address of rank %d: %w", cfg.Rank, peer, err)
	}
	addr := string(v)
	d := net.Dialer{Timeout: cfg.DialTimeout}
	for s := range cfg.Streams {
		backoff := 10 * time.Millisecond
		for {
			c, err := dialOnce(ctx, &d, cfg, addr, peer, s)
			if err == nil {
				if err := t.add(peer, s, c); err != nil {
					c.Close()
					return err
				}
				break
			}
			t.noteErr(&transport.PeerError{Op: "dial", Peer: peer, Err: err})
			if errors.Is(err, errRefused) {
				log.Warn("tcp: handshake failed", "peer", peer, "addr", addr, "stream", s, "err", err)
			}
			select {
			case <-ctx.Done():
				return nil // Connect reports the cause
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 500*time.Millisecond)
		}
	}
	return nil
}

func dialOnce(ctx context.Context, d *net.Dialer, cfg *Config, addr string, peer, stream int) (net.Conn, error) {
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
		c = tls.Client(c, tc)
	}
	hctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	stop := context.AfterFunc(hctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	err = clientHandshake(c, cfg, peer, stream)
	stop()
	if err != nil {
		c.Close()
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func setSockOpts(c net.Conn, bufSize int) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetNoDelay(true)
	if bufSize > 0 {
		tc.SetReadBuffer(bufSize)
		tc.SetWriteBuffer(bufSize)
	}
}
