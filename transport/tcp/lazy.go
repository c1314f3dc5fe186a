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
	"syscall"
	"time"

	"github.com/goccl/goccl/transport"
)

// Links on demand (Config.Lazy).
//
// An eager Connect links every pair of ranks before it returns: N-1
// connections, their goroutines and buffers on every rank, and N(N-1)/2
// address reads from the store over the job, whether or not an algorithm
// ever talks to most of those peers. A lazy endpoint instead links a pair
// when the first message between them is sent, which is what NCCL's
// runtime connection does. A ring allreduce then holds two links per
// rank, a tree or recursive-halving one O(log N).
//
// The protocol:
//
//   - Connect listens, publishes its address under AddrKey(rank), and
//     keeps listening for as long as the endpoint lives. Before it
//     returns it links the rank's ring neighbours, rank-1 and rank+1
//     (mod N), each dialing its right-hand neighbour: the links that
//     exist then make a ring, so that news of a failure can travel from
//     any rank to every other (the root package relays abort notices
//     over the links that exist).
//   - Isend to a peer with no link queues the message and starts a
//     dialer: it reads the peer's address from Config.KV (one Get per
//     link, once; goccl's Init gives a KV that answers from addresses
//     the ranks exchanged, so that no link needs the store after Init),
//     dials, and runs the same authenticated handshake as
//     an eager link (job id, sizes, HMAC over fresh nonces, TLS when
//     configured). When the link is up, the queued messages go first, in
//     order. Irecv never dials: the sender will, and a receive posted
//     from a peer with no link waits in the matcher until the link comes
//     up and its reader delivers the message.
//   - Either rank of a pair may dial, so both may dial at once. The
//     tie-break: the connection dialed by the lower rank wins. A listener
//     refuses a dial from a higher rank while it is itself dialing that
//     rank; a listener accepts a dial from a lower rank even while it is
//     dialing that rank, and its own dial, which the lower rank refuses,
//     then ends. Every decision about a pair is taken under the
//     endpoint's lock at the listener before the acceptance byte is
//     sent, so exactly one connection per pair is accepted. A dial that
//     is refused (the tie-break, a duplicate) retries with backoff and
//     stops as soon as a link is up.
//   - A peer that cannot be linked fails: a connection refused five
//     times running at the address the peer published (its listener is
//     gone, so is it), or no link within Config.InitTimeout. The queued
//     and later sends to it, and the receives posted from it, fail with
//     a transport.PeerError naming it and wrapping
//     transport.ErrPeerClosed, and OnPeerLoss's callback hears of it.
//
// Lazy links need Streams of 1; Connect links eagerly otherwise.

// refusedLimit is how many times in a row a lazy dial may find no
// listener at a peer's published address before the peer counts as gone.
const refusedLimit = 5

// links is a lazy endpoint's link manager.
type links struct {
	e   *endpoint
	cfg *Config
	ln  net.Listener
	log *slog.Logger

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	state  map[int]*linkState // peers that have been asked for, by rank

	dials atomic.Int64 // links this rank dialed (tests, metrics)
}

// linkState is one peer's link while it is being made.
type linkState struct {
	queue     []sendOp // sends waiting for the link, in order
	dialing   bool     // a dialer runs
	accepting bool     // a dial from the peer is past its tie-break
	err       error    // the link failed: sends fail with it
	done      chan struct{}
}

func (l *links) stateOf(peer int) *linkState {
	st := l.state[peer]
	if st == nil {
		st = &linkState{done: make(chan struct{})}
		l.state[peer] = st
	}
	return st
}

// connectLazy is Connect with Config.Lazy: listen, publish, link the ring
// neighbours, and return.
func connectLazy(ctx context.Context, cfg *Config, log *slog.Logger) (transport.Endpoint, error) {
	host, err := cfg.listenHost()
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d listen: %w", cfg.Rank, err)
	}
	e, err := newEndpoint(cfg, nil, log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	l := &links{e: e, cfg: cfg, ln: ln, log: log, state: make(map[int]*linkState)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	e.lazy = l
	e.wg.Go(l.acceptLoop)
	if err := cfg.KV.Set(ctx, AddrKey(cfg.Rank), []byte(ln.Addr().String())); err != nil {
		e.Close()
		return nil, fmt.Errorf("tcp: rank %d publish address: %w", cfg.Rank, err)
	}
	if cfg.Size == 1 {
		return e, nil
	}
	right, left := (cfg.Rank+1)%cfg.Size, (cfg.Rank+cfg.Size-1)%cfg.Size
	l.mu.Lock()
	l.ensure(right)
	wait := []*linkState{l.stateOf(right), l.stateOf(left)}
	l.mu.Unlock()
	for i, st := range wait {
		p := []int{right, left}[i]
		select {
		case <-st.done:
		case <-ctx.Done():
			e.Close()
			return nil, fmt.Errorf("tcp: rank %d connect: no link to ring neighbour %d: %w", cfg.Rank, p, context.Cause(ctx))
		}
		l.mu.Lock()
		err := st.err
		l.mu.Unlock()
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("tcp: rank %d connect: ring neighbour %d: %w", cfg.Rank, p, err)
		}
	}
	return e, nil
}

// send is Isend to a peer that had no link when it was called.
func (l *links) send(to int, tag transport.Tag, b []byte) transport.Request {
	l.mu.Lock()
	if p := l.e.peers[to].Load(); p != nil {
		l.mu.Unlock()
		return p.isend(tag, b)
	}
	if l.closed {
		l.mu.Unlock()
		return transport.Completed(transport.ErrClosed)
	}
	st := l.stateOf(to)
	if st.err != nil {
		err := st.err
		l.mu.Unlock()
		return transport.Completed(err)
	}
	r := transport.NewRequest()
	st.queue = append(st.queue, sendOp{tag: tag, b: b, r: r})
	l.ensure(to)
	l.mu.Unlock()
	return &sendReq{Req: r, e: l.e}
}

// ensure starts a dialer to peer unless a link is up, being made or
// failed; l.mu is held.
func (l *links) ensure(peer int) {
	st := l.stateOf(peer)
	if l.closed || st.dialing || st.accepting || st.err != nil || l.e.peers[peer].Load() != nil {
		return
	}
	st.dialing = true
	l.e.wg.Go(func() { l.dial(peer) })
}

// linked reports whether peer's link is up or being accepted.
func (l *links) linked(peer int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.state[peer]
	return l.e.peers[peer].Load() != nil || st != nil && (st.accepting || st.err != nil) || l.closed
}

// dial links peer from this side; see the protocol above.
func (l *links) dial(peer int) {
	defer func() {
		l.mu.Lock()
		l.state[peer].dialing = false
		l.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.InitTimeout)
	defer cancel()
	v, err := l.cfg.KV.Get(ctx, AddrKey(peer))
	if err != nil {
		l.fail(peer, fmt.Errorf("address of rank %d: %w", peer, err))
		return
	}
	addr := string(v)
	d := net.Dialer{Timeout: l.cfg.DialTimeout}
	backoff := 10 * time.Millisecond
	refused := 0
	for {
		if l.linked(peer) {
			return
		}
		c, err := dialOnce(ctx, &d, l.cfg, addr, peer, 0)
		if err == nil {
			l.dials.Add(1)
			l.attach(peer, c)
			return
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			refused++
		} else {
			refused = 0
		}
		// A refusal here is often the tie-break (the server only closes
		// the connection); the server logs refusals that are faults.
		l.log.Debug("tcp: dial failed", "peer", peer, "addr", addr, "err", err)
		if refused >= refusedLimit || ctx.Err() != nil {
			if l.linked(peer) {
				return
			}
			if ctx.Err() != nil && l.ctx.Err() == nil {
				err = fmt.Errorf("no link within %v: %w", l.cfg.InitTimeout, err)
			}
			l.fail(peer, fmt.Errorf("dial %s: %w", addr, err))
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// isTieBreak reports whether a refused handshake is the peer's own dial
// winning (or its link already up), which is no fault.
func isTieBreak(err error) bool {
	return errors.Is(err, errRefused) && errors.Is(err, errLostTie)
}

// errLostTie: the server refused this dial because its own won.
var errLostTie = errors.New("the peer's connection wins")

// fail ends the attempt to link peer with cause: what waits on the link
// fails, naming the peer.
func (l *links) fail(peer int, cause error) {
	l.mu.Lock()
	st := l.state[peer]
	if l.closed || st.err != nil || l.e.peers[peer].Load() != nil {
		l.mu.Unlock()
		return
	}
	pe := &transport.PeerError{Op: "connect", Peer: peer, Err: fmt.Errorf("%w: %v", transport.ErrPeerClosed, cause)}
	st.err = pe
	q := st.queue
	st.queue = nil
	close(st.done)
	l.mu.Unlock()
	l.log.Warn("tcp: cannot link to peer", "peer", peer, "err", cause)
	for _, op := range q {
		op.r.Complete(&transport.PeerError{Op: "send", Peer: peer, Err: pe.Err})
	}
	l.e.m.FailPeer(peer, &transport.PeerError{Op: "recv", Peer: peer, Err: pe.Err})
	if f := l.e.onLoss.Load(); f != nil && !l.e.closing.Load() {
		(*f)(pe)
	}
}

// attach makes c, authenticated, the link to peer and sends what waited.
func (l *links) attach(peer int, c net.Conn) {
	l.mu.Lock()
	st := l.stateOf(peer)
	st.accepting = false
	if l.closed || st.err != nil || l.e.peers[peer].Load() != nil {
		l.mu.Unlock()
		c.Close()
		return
	}
	p := l.e.newPeer(peer, []net.Conn{c})
	p.queue, st.queue = st.queue, nil
	if len(p.queue) > 0 {
		p.startSender()      // p is not shared yet: no lock needed
		p.wake <- struct{}{} // a new channel: it has room
	}
	l.e.peers[peer].Store(p)
	l.e.start(p)
	close(st.done)
	l.mu.Unlock()
	if f := l.e.onLink.Load(); f != nil {
		(*f)(peer)
	}
}

// admit is the tie-break at the listener: it decides, before the
// acceptance byte, whether a dial from peer becomes the link.
func (l *links) admit(peer int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateOf(peer)
	switch {
	case l.closed:
		return errors.New("endpoint closed")
	case l.e.peers[peer].Load() != nil || st.accepting:
		return fmt.Errorf("%w: %w: duplicate connection from rank %d", errRefused, errLostTie, peer)
	case st.err != nil:
		return fmt.Errorf("%w: rank %d already failed", errRefused, peer)
	case st.dialing && l.e.rank < peer:
		return fmt.Errorf("%w: %w: rank %d dials rank %d too and the lower rank's connection wins", errRefused, errLostTie, l.e.rank, peer)
	}
	st.accepting = true
	return nil
}

// unadmit undoes admit when the handshake fails after it.
func (l *links) unadmit(peer int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateOf(peer)
	st.accepting = false
	if len(st.queue) > 0 {
		l.ensure(peer)
	}
}

// acceptLoop accepts dials for the endpoint's life.
func (l *links) acceptLoop() {
	var refused refusals
	defer refused.flush(l.log)
	var pending atomic.Int64
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // listener closed: the endpoint is closing
		}
		if max := l.cfg.MaxPending; max > 0 && pending.Load() >= int64(max) {
			remote := c.RemoteAddr().String()
			c.Close()
			refused.note(l.log, refusedOverCap, remote, fmt.Errorf("%d connections already in their handshake", max))
			continue
		}
		pending.Add(1)
		if l.cfg.TLS != nil {
			c = tls.Server(c, l.cfg.TLS)
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.e.wg.Go(func() {
			defer pending.Add(-1)
			l.accept(c, &refused)
		})
		l.mu.Unlock()
	}
}

// accept runs the server's handshake on c and links it if admitted.
func (l *links) accept(c net.Conn, refused *refusals) {
	remote := c.RemoteAddr().String()
	hctx, cancel := context.WithTimeout(l.ctx, l.cfg.HandshakeTimeout)
	defer cancel()
	stop := context.AfterFunc(hctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	admitted := false
	rank, _, err := serverHandshake(c, l.cfg, func(rank, stream int) error {
		err := l.admit(rank)
		admitted = err == nil
		return err
	})
	stop()
	if err != nil {
		if admitted {
			l.unadmit(rank)
		}
		c.Close()
		switch {
		case rank < 0 && l.ctx.Err() != nil:
		case rank < 0 && errors.Is(hctx.Err(), context.DeadlineExceeded):
			refused.note(l.log, refusedSilent, remote, fmt.Errorf("no hello within %v", l.cfg.HandshakeTimeout))
		case rank < 0 && (errors.Is(err, errRefused) || isTLSError(err)):
			refused.note(l.log, refusedGarbage, remote, err)
		case rank < 0:
			refused.note(l.log, refusedClosed, remote, err)
		case isTieBreak(err):
			l.log.Debug("tcp: tie-break", "peer", rank, "err", err)
		default:
			l.log.Warn("tcp: refused connection", "remote", remote, "peer", rank, "err", err)
		}
		return
	}
	c.SetDeadline(time.Time{})
	l.attach(rank, c)
}

// close stops the listener and the dialers; no link comes up after it.
func (l *links) close() {
	l.mu.Lock()
	l.closed = true
	var q []sendOp
	for _, st := range l.state {
		q = append(q, st.queue...)
		st.queue = nil
	}
	l.mu.Unlock()
	l.cancel()
	l.ln.Close()
	for _, op := range q {
		op.r.Complete(transport.ErrClosed)
	}
}

// Linked implements transport.Linker: whether a link to peer is up (a
// peer that was never needed has none).
func (e *endpoint) Linked(peer int) bool {
	if peer < 0 || peer >= e.size || peer == e.rank {
		return false
	}
	return e.peers[peer].Load() != nil
}

// Links returns the number of peers this endpoint holds a link to.
func (e *endpoint) Links() int {
	n := 0
	for i := range e.peers {
		if e.peers[i].Load() != nil {
			n++
		}
	}
	return n
}

// OnLink implements transport.LinkNotifier: f hears of each link that
// comes up from now on (an eager endpoint's are all up already).
func (e *endpoint) OnLink(f func(peer int)) { e.onLink.Store(&f) }

var (
	_ transport.Linker       = (*endpoint)(nil)
	_ transport.LinkNotifier = (*endpoint)(nil)
)
