package store

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Error codes carried by an opErr response.
const (
	codeOther      byte = 1
	codeAuth       byte = 2
	codeProtocol   byte = 3
	codeNotInteger byte = 4
	codeTooLarge   byte = 5
)

const nonceLen = 32

// Server is a TCP store server. It keeps every key in memory; a
// connection that sends requests is served by its own goroutine, and a Get
// or Wait that waits blocks neither its connection nor any other.
//
// On Linux a TCP or Unix connection that has sent nothing for a short
// while (idleAfter) gives up its goroutine and read buffer and waits at
// the Server's one idle poller (epoll), which gives it a goroutine again
// when its next request or its hang-up arrives: an idle rank costs the
// server its socket and a few hundred bytes, not a goroutine's stack.
//
// A Server may serve several listeners at once. Close stops them all.
//
// A new connection must authenticate (with a Secret) or send its first
// message (without one) within Options.HandshakeTimeout, in a frame of at
// most MaxPreAuthMessage bytes, or the server closes it; at most
// Options.MaxPending connections wait to authenticate at once, and the
// server closes those beyond as soon as it accepts them. So silent
// clients (port scanners, health checks, crashed processes) hold no
// descriptor for long.
type Server struct {
	opts    Options
	t       *table
	refused refusals

	mu      sync.Mutex
	lns     map[net.Listener]struct{}
	conns   map[net.Conn]struct{}
	pending int // connections accepted that have not authenticated yet
	closed  bool
	idle    *idlePoller    // made at the first park
	noIdle  bool           // the idle poller could not be made: never park
	wg      sync.WaitGroup // a count per connection, and the idle poller

	// idleAfter is how long a connection's goroutine waits for a request
	// before it parks the connection at the idle poller.
	idleAfter time.Duration

	requests atomic.Int64 // requests handled, over all connections
}

// Requests returns how many requests s has handled since it was made
// (authentication not counted): what a job's rendezvous costs the store.
func (s *Server) Requests() int64 { return s.requests.Load() }

// NewServer returns a server with an empty store.
func NewServer(opts Options) *Server {
	return &Server{
		opts:      opts,
		t:         newTable(),
		lns:       make(map[net.Listener]struct{}),
		conns:     make(map[net.Conn]struct{}),
		idleAfter: idleAfter,
	}
}

// Serve runs a store server on ln until ctx ends, and then closes ln and
// every connection it accepted.
func Serve(ctx context.Context, ln net.Listener, opts Options) error {
	s := NewServer(opts)
	defer s.Close()
	return s.Serve(ctx, ln)
}

// Serve accepts connections on ln until ctx ends or s is closed; it then
// closes ln and returns nil. Any other accept failure is returned. The
// connections accepted stay open until s.Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return &OpError{Op: "serve", Addr: ln.Addr().String(), Err: ErrClosed}
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if ctx.Err() != nil || closed || errors.Is(err, net.ErrClosed) {
				ln.Close()
				return nil
			}
			return &OpError{Op: "accept", Addr: ln.Addr().String(), Err: err}
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			continue
		}
		if max := s.opts.maxPending(); max > 0 && s.pending >= max {
			// Close it at once, rather than leave it in the listen
			// backlog: the backlog would fill and refuse the legitimate
			// clients too, which retry anyway.
			s.mu.Unlock()
			remote := c.RemoteAddr().String()
			c.Close()
			s.refused.note(s.opts.logger(), refusedOverCap, remote,
				fmt.Errorf("%d connections already wait to authenticate", max))
			continue
		}
		s.pending++
		s.conns[c] = struct{}{}
		s.wg.Add(1) // done by the connection's end
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops every Serve, closes every connection and waits for their
// goroutines to end. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	p := s.idle
	s.mu.Unlock()
	if p != nil {
		// After the sockets' Close: the connections it resumes end.
		p.close()
	}
	s.wg.Wait()
	s.refused.flush(s.opts.logger())
	return nil
}

// connReadBuf is the read buffer of a connection's serving goroutine. A
// small one: requests are small, and a large value is read straight into
// its own slice.
const connReadBuf = 512

// readers holds the read buffers of serving goroutines: a connection holds
// one only while it has a goroutine, and gives it back when it parks.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, connReadBuf) }}

func getReader(c net.Conn) *bufio.Reader {
	br := readers.Get().(*bufio.Reader)
	br.Reset(c)
	return br
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readers.Put(br)
}

// idleAfter is how long a serving goroutine waits for its connection's
// next request before it parks the connection. Not zero: a client's
// requests come in bursts (Init's rendezvous, a Shrink round), and a
// goroutine that stays for the next request of a burst saves each request
// a trip through the poller (an epoll_ctl, a wake, a new goroutine) and
// the burst's callers that latency. Short: after the burst a rank is idle
// for the rest of the job, and its goroutine should not outlive the burst
// by much.
const idleAfter = 100 * time.Millisecond

// srvConn is the state of one client connection. It has a serving
// goroutine (serveConn or resume) while it may have requests to read, and
// none while parked at the idle poller; exactly one of the two owns it.
type srvConn struct {
	s      *Server
	c      net.Conn
	ctx    context.Context // ends when the connection ends
	stop   context.CancelFunc
	wmu    sync.Mutex // one reply written at a time
	mu     sync.Mutex
	cancel map[uint64]context.CancelFunc // waiting Gets and Waits by id
	owned  map[string][]byte             // ephemeral keys this connection set
	wg     sync.WaitGroup                // waiting Gets and Waits

	parkable bool // it may wait at the idle poller; only its goroutine reads or writes this
	idleState
}

func (s *Server) serveConn(c net.Conn) {
	ctx, stop := context.WithCancel(context.Background())
	sc := &srvConn{s: s, c: c, ctx: ctx, stop: stop, parkable: canPark(c)}
	br := getReader(c)
	first, ok := sc.authenticate(br)
	s.mu.Lock()
	s.pending--
	s.mu.Unlock()
	parked := ok && (first == nil || sc.handle(*first)) && sc.serve(br)
	putReader(br)
	if !parked {
		sc.end()
	}
}

// resume serves a connection that the idle poller has seen readable (a
// request, or its end).
func (sc *srvConn) resume() {
	br := getReader(sc.c)
	parked := sc.serve(br)
	putReader(br)
	if !parked {
		sc.end()
	}
}

// serve reads and handles requests until the connection must end (false)
// or it has been parked at the idle poller (true); then the caller gives br
// back, which holds nothing.
func (sc *srvConn) serve(br *bufio.Reader) bool {
	limit := sc.s.opts.maxMessage()
	for {
		if sc.parkable && br.Buffered() == 0 {
			idle, err := sc.awaitRequest(br)
			if err != nil {
				return false
			}
			if idle {
				if sc.s.park(sc) {
					return true
				}
				// Served by this goroutine from now on, blocking in Read
				// as before the poller, with no deadline.
				sc.parkable = false
				if err := sc.c.SetReadDeadline(time.Time{}); err != nil {
					return false
				}
			}
		}
		m, err := readMsg(br, limit)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				sc.sendErr(0, codeProtocol, err.Error())
			}
			return false
		}
		if !sc.handle(m) {
			return false
		}
	}
}

// awaitRequest waits up to idleAfter for the first byte of the next
// request. It reports idle when none came, with br still empty: the
// request, when it comes, is all in the kernel's socket buffer. Only the
// wait for a frame's first byte has a deadline; the rest of a frame is
// read without one, as always.
func (sc *srvConn) awaitRequest(br *bufio.Reader) (idle bool, err error) {
	if err := sc.c.SetReadDeadline(time.Now().Add(sc.s.idleAfter)); err != nil {
		return false, err
	}
	_, err = br.Peek(1)
	if errors.Is(err, os.ErrDeadlineExceeded) && br.Buffered() == 0 {
		// Parked with the deadline past: the goroutine that resumes the
		// connection sets its own before it reads.
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, sc.c.SetReadDeadline(time.Time{})
}

// park hands sc to the idle poller, making the poller at the first park.
// It reports false when sc must keep its goroutine: the server is closed,
// or the poller cannot be made or take sc.
func (s *Server) park(sc *srvConn) bool {
	s.mu.Lock()
	if s.closed || s.noIdle {
		s.mu.Unlock()
		return false
	}
	if s.idle == nil {
		p, err := newIdlePoller()
		if err != nil {
			s.noIdle = true
			s.mu.Unlock()
			s.opts.logger().Warn("goccl store: idle connections keep their goroutines", "err", err)
			return false
		}
		s.idle = p
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.run()
		}()
	}
	p := s.idle
	s.mu.Unlock()
	return p.park(sc)
}

// end ends a connection: close the socket (unblocking waiters' writes),
// cancel the waiting Gets and Waits, wait for their goroutines, drop the
// connection's ephemeral keys.
func (sc *srvConn) end() {
	sc.c.Close()
	sc.stop()
	sc.wg.Wait()
	sc.dropOwned()
	s := sc.s
	s.mu.Lock()
	delete(s.conns, sc.c)
	s.mu.Unlock()
	s.wg.Done()
}

// kill closes the connection from one of its waiting Gets or Waits, whose
// reply could not be written. If the connection is parked nothing reads
// it, and closing its descriptor takes it out of the epoll set without an
// event: so it is resumed here, and its goroutine ends it.
func (sc *srvConn) kill() {
	sc.c.Close()
	sc.s.mu.Lock()
	p := sc.s.idle
	sc.s.mu.Unlock()
	if p != nil {
		p.unpark(sc)
	}
}

// authenticate sends the server's hello and reads the connection's first
// message under the handshake deadline and MaxPreAuthMessage. With a
// secret that message must be a valid opAuth, which it answers; without
// one any request will do, and authenticate returns it to be served. It
// reports false, having logged why, when the connection must end.
func (sc *srvConn) authenticate(br *bufio.Reader) (*msg, bool) {
	s, c := sc.s, sc.c
	if d := s.opts.handshakeTimeout(); d > 0 {
		c.SetDeadline(time.Now().Add(d))
	}
	var nonce [nonceLen]byte
	rand.Read(nonce[:])
	flags := []byte{0}
	secret := len(s.opts.Secret) != 0
	if secret {
		flags[0] = 1
	}
	refuse := func(reason string, err error) (*msg, bool) {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			s.refused.note(s.opts.logger(), reason, c.RemoteAddr().String(), err)
		}
		return nil, false
	}
	if err := sc.send(&msg{op: opHello, args: [][]byte{[]byte(protoMagic), nonce[:], flags}}); err != nil {
		return refuse(refusedClosed, err)
	}
	m, err := readMsg(br, min(MaxPreAuthMessage, s.opts.maxMessage()))
	switch {
	case errors.Is(err, errFrameTooLarge):
		err = fmt.Errorf("%w (before authentication)", err)
		sc.sendErr(0, codeProtocol, err.Error())
		return refuse(refusedTooLarge, err)
	case errors.Is(err, ErrProtocol):
		sc.sendErr(0, codeProtocol, err.Error())
		return refuse(refusedGarbage, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refuse(refusedSilent, fmt.Errorf("no message within %v", s.opts.handshakeTimeout()))
	case err != nil:
		return refuse(refusedClosed, err)
	}
	if secret {
		if m.op != opAuth {
			sc.sendErr(m.id, codeAuth, "connection not authenticated")
			return refuse(refusedAuth, fmt.Errorf("%v before authentication", m.op))
		}
		reply, ok := checkAuth(s.opts.Secret, nonce[:], m.args)
		if !ok {
			sc.sendErr(m.id, codeAuth, "wrong secret")
			return refuse(refusedAuth, errors.New("wrong secret"))
		}
		if err := sc.send(&msg{op: opOK, id: m.id, args: [][]byte{reply}}); err != nil {
			return refuse(refusedClosed, err)
		}
	}
	// Authenticated: from now on clients may stay silent for as long as
	// they like (a Get that waits).
	if err := c.SetDeadline(time.Time{}); err != nil {
		return nil, false
	}
	if secret {
		return nil, true
	}
	return &m, true
}

// macs of the challenge-response: the client signs both nonces under the
// label "client", the server under "server", so neither can be replayed as
// the other.
func authMAC(secret []byte, label string, first, second []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(label))
	h.Write(first)
	h.Write(second)
	return h.Sum(nil)
}

// checkAuth verifies a client's opAuth arguments (clientNonce, mac) and
// returns the server's proof.
func checkAuth(secret, serverNonce []byte, args [][]byte) ([]byte, bool) {
	if len(args) != 2 || len(args[0]) != nonceLen {
		return nil, false
	}
	want := authMAC(secret, "client", serverNonce, args[0])
	if !hmac.Equal(want, args[1]) {
		return nil, false
	}
	return authMAC(secret, "server", args[0], serverNonce), true
}

// handle serves one request. It returns false when the connection must end.
func (sc *srvConn) handle(m msg) bool {
	sc.s.requests.Add(1)
	t := sc.s.t
	bad := func(want int) bool {
		if len(m.args) != want {
			sc.sendErr(m.id, codeProtocol, fmt.Sprintf("%v takes %d arguments, got %d", m.op, want, len(m.args)))
			return true
		}
		return false
	}
	switch m.op {
	case opAuth:
		sc.sendErr(m.id, codeProtocol, "already authenticated")
		return false
	case opSet:
		if bad(2) {
			return false
		}
		t.set(string(m.args[0]), m.args[1])
		return sc.send(&msg{op: opOK, id: m.id}) == nil
	case opAdd:
		if bad(2) {
			return false
		}
		d, err := getInt64(m.args[1])
		if err != nil {
			sc.sendErr(m.id, codeProtocol, err.Error())
			return false
		}
		v, err := t.add(string(m.args[0]), d)
		if err != nil {
			return sc.sendErr(m.id, codeNotInteger, err.Error()) == nil
		}
		return sc.send(&msg{op: opOK, id: m.id, args: [][]byte{putInt64(v)}}) == nil
	case opCompareSet:
		if bad(3) {
			return false
		}
		cur, ok := t.compareSet(string(m.args[0]), m.args[1], m.args[2])
		args := [][]byte{cur}
		if ok {
			args = append(args, nil) // a second argument marks "present"
		}
		return sc.send(&msg{op: opOK, id: m.id, args: args}) == nil
	case opEphemeral:
		if bad(2) {
			return false
		}
		key := string(m.args[0])
		t.set(key, m.args[1])
		sc.mu.Lock()
		if sc.owned == nil {
			sc.owned = map[string][]byte{}
		}
		sc.owned[key] = m.args[1]
		sc.mu.Unlock()
		return sc.send(&msg{op: opOK, id: m.id}) == nil
	case opDelete:
		if bad(1) {
			return false
		}
		var b byte
		if t.del(string(m.args[0])) {
			b = 1
		}
		return sc.send(&msg{op: opOK, id: m.id, args: [][]byte{{b}}}) == nil
	case opNumKeys:
		if bad(0) {
			return false
		}
		return sc.send(&msg{op: opOK, id: m.id, args: [][]byte{putInt64(t.numKeys())}}) == nil
	case opCancel:
		sc.mu.Lock()
		if cancel, ok := sc.cancel[m.id]; ok {
			cancel()
		}
		sc.mu.Unlock()
		return true
	case opGet, opWait:
		if m.op == opGet && bad(1) {
			return false
		}
		keys := make([]string, len(m.args))
		for i, a := range m.args {
			keys[i] = string(a)
		}
		ctx, cancel := context.WithCancel(sc.ctx)
		sc.mu.Lock()
		if sc.cancel == nil {
			sc.cancel = make(map[uint64]context.CancelFunc)
		}
		if _, dup := sc.cancel[m.id]; dup {
			sc.mu.Unlock()
			cancel()
			sc.sendErr(m.id, codeProtocol, "request id in use")
			return false
		}
		sc.cancel[m.id] = cancel
		sc.mu.Unlock()
		sc.wg.Add(1)
		go func() {
			defer sc.wg.Done()
			v, err := t.wait(ctx, keys...)
			sc.mu.Lock()
			delete(sc.cancel, m.id)
			sc.mu.Unlock()
			cancel()
			if err != nil {
				// Cancelled by the client (who no longer listens) or the
				// connection ended: nothing to answer.
				return
			}
			r := &msg{op: opOK, id: m.id}
			if m.op == opGet {
				r.args = [][]byte{v}
			}
			if sc.send(r) != nil {
				sc.kill()
			}
		}()
		return true
	default:
		sc.sendErr(m.id, codeProtocol, fmt.Sprintf("unexpected op %v from a client", m.op))
		return false
	}
}

// dropOwned deletes the connection's ephemeral keys that still hold the
// value it set: the client is gone.
func (sc *srvConn) dropOwned() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for k, v := range sc.owned {
		sc.s.t.delIf(k, v)
	}
}

func (sc *srvConn) send(m *msg) error {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	if err := checkEncodable(m, sc.s.opts.maxMessage()); err != nil {
		// Only a reply can be too large here (a Get of a value set under a
		// larger limit): tell the client instead.
		m = &msg{op: opErr, id: m.id, args: [][]byte{{codeTooLarge}, []byte(err.Error())}}
	}
	// One frame, one write: no buffer kept per connection.
	_, err := sc.c.Write(appendMsg(nil, m))
	return err
}

func (sc *srvConn) sendErr(id uint64, code byte, text string) error {
	return sc.send(&msg{op: opErr, id: id, args: [][]byte{{code}, []byte(text)}})
}

// remoteError turns an opErr response into an error.
func remoteError(m msg) error {
	if len(m.args) != 2 || len(m.args[0]) != 1 {
		return fmt.Errorf("%w: malformed error response", ErrProtocol)
	}
	text := string(m.args[1])
	switch m.args[0][0] {
	case codeAuth:
		return fmt.Errorf("%w: server: %s", ErrAuth, text)
	case codeProtocol:
		return fmt.Errorf("%w: server: %s", ErrProtocol, text)
	case codeNotInteger:
		return fmt.Errorf("%w: server: %s", ErrNotInteger, text)
	case codeTooLarge:
		return fmt.Errorf("%w: server: %s", ErrTooLarge, text)
	}
	return fmt.Errorf("server: %s", text)
}

var _ io.Closer = (*Server)(nil)

// parked returns how many of s's connections wait at the idle poller.
func (s *Server) parked() int {
	s.mu.Lock()
	p := s.idle
	s.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.parked()
}
