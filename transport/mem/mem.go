package mem

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/transport"
)

// DefaultEagerLimit is the largest message sent eagerly when
// Config.EagerLimit is zero.
const DefaultEagerLimit = 64 << 10

// DefaultSpin is how long a wait on a receive polls before it parks when
// Config.Spin is zero.
const DefaultSpin = 20 * time.Microsecond

// Config tunes an in-process mesh. The zero value is a fault-free mesh with
// the default eager limit and spin.
type Config struct {
	// EagerLimit is the largest message that is copied into the receiver's
	// unexpected queue so that its send completes at once. Larger messages
	// are sent by rendezvous: the send completes only when the receiver has
	// copied it. Zero means DefaultEagerLimit; a negative value sends every
	// message by rendezvous (a useful setting to shake out algorithms that
	// wait on a send before posting the matching receive).
	EagerLimit int
	// Spin is how long a goroutine waiting on a receive polls for it,
	// yielding the processor between polls, before it parks on a channel
	// (see transport.Spinner: spinning pauses by itself while it does not
	// pay, e.g. with more busy goroutines than processors). Zero means
	// DefaultSpin; a negative value parks at once.
	Spin time.Duration
	// Faults is the fault plan: each fault fires once, deterministically.
	Faults []Fault
	// Seed seeds the choices faults make (which byte Corrupt flips).
	Seed uint64
}

// FaultKind says what a Fault does.
type FaultKind int

// The kinds of fault.
const (
	// Drop silently loses message After on the link; its send succeeds.
	Drop FaultKind = iota + 1
	// CloseLink breaks the pair From-To in both directions at message
	// After: sends fail with ErrPeerClosed, and pending and later receives
	// on either side fail with a PeerError wrapping ErrPeerClosed.
	CloseLink
	// Delay holds message After, and every later message on the link, for
	// Delay before delivering them in order.
	Delay
	// Corrupt flips one byte (chosen by Config.Seed) of message After; the
	// sender's buffer is untouched.
	Corrupt
	// Kill closes rank From's endpoint when it starts its send number After
	// (counted over all peers, from 0); To is ignored. That send fails with
	// ErrClosed and every peer sees ErrPeerClosed from From.
	Kill
)

// Fault is one entry of a fault plan. It applies to the link From->To and
// fires on the link's message number After, counted from 0 in the order the
// sends were started.
type Fault struct {
	Kind     FaultKind
	From, To int
	After    int
	Delay    time.Duration
}

// New returns the endpoints of a mesh of size ranks with the default config.
func New(size int) []transport.Endpoint {
	return NewWithConfig(size, Config{})
}

// NewWithConfig returns the endpoints of a mesh of size ranks; endpoint i is
// rank i. Each endpoint must be closed.
func NewWithConfig(size int, cfg Config) []transport.Endpoint {
	if size < 1 {
		panic("mem: size must be at least 1")
	}
	if cfg.EagerLimit == 0 {
		cfg.EagerLimit = DefaultEagerLimit
	}
	m := &mesh{
		cfg:   cfg,
		eps:   make([]*endpoint, size),
		links: make([]link, size*size),
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	for _, f := range cfg.Faults {
		if f.From < 0 || f.From >= size || (f.Kind != Kill && (f.To < 0 || f.To >= size)) {
			panic("mem: fault names a rank out of range")
		}
		if f.Kind == Kill {
			m.kills = append(m.kills, f)
			continue
		}
		l := &m.links[f.From*size+f.To]
		l.faults = append(l.faults, f)
	}
	if cfg.Spin == 0 {
		cfg.Spin = DefaultSpin
	}
	out := make([]transport.Endpoint, size)
	for i := range size {
		m.eps[i] = &endpoint{mesh: m, rank: i, m: transport.NewMatcher(size)}
		if cfg.Spin > 0 {
			m.eps[i].spin = transport.NewSpinner(cfg.Spin)
			m.eps[i].m.SetSpin(m.eps[i].spin)
		}
		out[i] = m.eps[i]
	}
	return out
}

type mesh struct {
	cfg    Config
	eps    []*endpoint
	links  []link // [from*size+to]
	kills  []Fault
	boards boards

	rngMu sync.Mutex
	rng   *rand.Rand
}

// link is the ordered channel from one rank to another. Its lock orders the
// sends on it, which matters only while messages are held by a Delay.
type link struct {
	mu     sync.Mutex
	n      int // messages started on the link
	faults []Fault
	broken error // set by CloseLink
	held   []held
	timer  *time.Timer
}

type held struct {
	tag  transport.Tag
	data []byte
	send *transport.Req // nil if the send already completed (eager)
}

type endpoint struct {
	mesh *mesh
	rank int
	m    *transport.Matcher
	spin *transport.Spinner // receives' and boards' spin policy, or nil

	mu     sync.RWMutex // read-held by sends in flight, write-held by Close
	closed bool         // guarded by mu
	dead   atomic.Bool  // closed, readable without mu (from callbacks)
	sent   atomic.Int64
}

var (
	_ transport.Endpoint      = (*endpoint)(nil)
	_ transport.StrayReporter = (*endpoint)(nil)
)

// OnStray implements transport.StrayReporter.
func (e *endpoint) OnStray(finished func(transport.Tag) bool, report func(from int, tag transport.Tag, head []byte)) {
	e.m.SetStray(finished, report)
}

// Retire implements transport.StrayReporter.
func (e *endpoint) Retire(tag transport.Tag) { e.m.Retire(tag) }

func (e *endpoint) Rank() int { return e.rank }
func (e *endpoint) Size() int { return len(e.mesh.eps) }

// Via names the route to peer, as transport/route's endpoint does: "mem"
// for every rank of the mesh, "" out of range.
func (e *endpoint) Via(peer int) string {
	if peer < 0 || peer >= len(e.mesh.eps) {
		return ""
	}
	return "mem"
}

func (e *endpoint) Irecv(from int, tag transport.Tag, b []byte) transport.Request {
	return e.m.Post(from, tag, b)
}

func (e *endpoint) Isend(to int, tag transport.Tag, b []byte) transport.Request {
	if err := transport.CheckPeer("send", to, len(e.mesh.eps)); err != nil {
		return transport.Completed(err)
	}
	if len(e.mesh.kills) > 0 {
		n := int(e.sent.Add(1) - 1)
		for _, f := range e.mesh.kills {
			if f.From == e.rank && f.After == n {
				e.Close()
			}
		}
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return transport.Completed(transport.ErrClosed)
	}
	l := &e.mesh.links[e.rank*len(e.mesh.eps)+to]
	l.mu.Lock()
	seq := l.n
	l.n++
	if l.broken != nil {
		l.mu.Unlock()
		return transport.Completed(l.broken)
	}
	for _, f := range l.faults {
		if f.After == seq && f.Kind == CloseLink {
			l.mu.Unlock()
			e.mesh.breakPair(e.rank, to)
			return transport.Completed(&transport.PeerError{Op: "send", Peer: to, Err: transport.ErrPeerClosed})
		}
	}
	defer l.mu.Unlock()
	data, copied := b, false
	for _, f := range l.faults {
		if f.After != seq {
			continue
		}
		switch f.Kind {
		case Drop:
			return transport.Completed(nil)
		case Corrupt:
			data, copied = append([]byte(nil), data...), true
			if len(data) > 0 {
				e.mesh.rngMu.Lock()
				i := e.mesh.rng.IntN(len(data))
				x := byte(1 + e.mesh.rng.IntN(255))
				e.mesh.rngMu.Unlock()
				data[i] ^= x
			}
		case Delay:
			if l.timer == nil {
				l.timer = time.AfterFunc(f.Delay, func() { e.mesh.release(e.rank, to) })
			}
		}
	}
	eager := copied || len(data) <= e.mesh.cfg.EagerLimit
	if l.timer != nil { // holding
		if eager {
			l.held = append(l.held, held{tag: tag, data: append(scratch.Get(len(data))[:0], data...)})
			return transport.Completed(nil)
		}
		r := transport.NewRequest()
		l.held = append(l.held, held{tag: tag, data: data, send: r})
		return r
	}
	return e.mesh.deliver(e.rank, to, tag, data, eager)
}

// deliver hands a message to rank to's matcher. The caller holds the link's
// lock and the sender's read lock.
func (m *mesh) deliver(from, to int, tag transport.Tag, data []byte, eager bool) transport.Request {
	dst := m.eps[to]
	if eager {
		if err := dst.m.Deliver(from, tag, data); err != nil {
			return transport.Completed(&transport.PeerError{Op: "send", Peer: to, Err: transport.ErrPeerClosed})
		}
		return transport.Completed(nil)
	}
	r := transport.NewRequest()
	m.deliverRef(from, to, tag, data, r)
	return r
}

func (m *mesh) deliverRef(from, to int, tag transport.Tag, data []byte, r *transport.Req) {
	src := m.eps[from]
	m.eps[to].m.DeliverRef(from, tag, data, func(err error) {
		switch {
		case err == nil:
			r.Complete(nil)
		case src.isClosed():
			r.Complete(transport.ErrClosed)
		default:
			r.Complete(&transport.PeerError{Op: "send", Peer: to, Err: transport.ErrPeerClosed})
		}
	})
}

// release delivers the messages a Delay held on link from->to.
func (m *mesh) release(from, to int) {
	src := m.eps[from]
	src.mu.RLock()
	defer src.mu.RUnlock()
	l := &m.links[from*len(m.eps)+to]
	l.mu.Lock()
	defer l.mu.Unlock()
	if src.closed || l.timer == nil {
		return
	}
	for _, h := range l.held {
		if h.send == nil {
			m.eps[to].m.DeliverOwned(from, h.tag, h.data)
		} else {
			m.deliverRef(from, to, h.tag, h.data, h.send)
		}
	}
	l.held, l.timer = nil, nil
}

// dropHeld fails the messages held on link from->to. Caller holds l.mu.
func (l *link) dropHeld(err error) {
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	for _, h := range l.held {
		if h.send != nil {
			h.send.Complete(err)
		}
	}
	l.held = nil
}

// breakPair breaks the links a->b and b->a. The caller holds no link lock.
func (m *mesh) breakPair(a, b int) {
	n := len(m.eps)
	for _, d := range [][2]int{{a, b}, {b, a}} {
		l := &m.links[d[0]*n+d[1]]
		l.mu.Lock()
		l.broken = &transport.PeerError{Op: "send", Peer: d[1], Err: transport.ErrPeerClosed}
		l.dropHeld(l.broken)
		l.mu.Unlock()
	}
	m.eps[b].m.FailPeer(a, &transport.PeerError{Op: "recv", Peer: a, Err: transport.ErrPeerClosed})
	m.eps[a].m.FailPeer(b, &transport.PeerError{Op: "recv", Peer: b, Err: transport.ErrPeerClosed})
}

func (e *endpoint) isClosed() bool { return e.dead.Load() }

// Close fails this endpoint's pending requests with ErrClosed and every
// peer's pending receives from it with a PeerError wrapping ErrPeerClosed.
func (e *endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.dead.Store(true)
	e.mu.Unlock()
	e.m.Abort(transport.ErrClosed)
	e.mesh.wakeBoards(e.rank)
	n := len(e.mesh.eps)
	for p := range n {
		out := &e.mesh.links[e.rank*n+p]
		out.mu.Lock()
		out.dropHeld(transport.ErrClosed)
		out.mu.Unlock()
		if p == e.rank {
			continue
		}
		in := &e.mesh.links[p*n+e.rank]
		in.mu.Lock()
		in.dropHeld(&transport.PeerError{Op: "send", Peer: e.rank, Err: transport.ErrPeerClosed})
		in.mu.Unlock()
		e.mesh.eps[p].m.FailPeer(e.rank, &transport.PeerError{Op: "recv", Peer: e.rank, Err: transport.ErrPeerClosed})
	}
	return nil
}
