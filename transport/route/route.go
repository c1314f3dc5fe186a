package route

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/transport"
)

// Route is one underlying endpoint and the job ranks it reaches.
type Route struct {
	// Name says what the route is ("shm", "tcp"); Endpoint.Via returns it.
	// Empty: "route" followed by its index.
	Name string
	// Endpoint is this rank's endpoint of the route. The router owns it
	// and closes it in Close.
	Endpoint transport.Endpoint
	// Ranks[i] is the job rank of the endpoint's rank i, so len(Ranks) is
	// Endpoint.Size() and Ranks[Endpoint.Rank()] is this rank. Nil: the
	// endpoint spans the whole job with the job's numbering.
	Ranks []int
}

// Endpoint routes each peer's messages over one of several endpoints. It
// is a transport.Endpoint, a transport.PeerLossNotifier and a
// transport.StrayReporter (see the package doc for what these forward).
type Endpoint struct {
	rank, size int
	routes     []Route
	jobOf      [][]int // per route: endpoint rank -> job rank
	via        []int   // job rank -> route index
	local      []int   // job rank -> rank in its route's endpoint

	onLoss   atomic.Pointer[func(*transport.PeerError)]
	reported []atomic.Bool // job rank: its loss was reported

	closeOnce sync.Once
	closeErr  error
}

var (
	_ transport.Endpoint         = (*Endpoint)(nil)
	_ transport.PeerLossNotifier = (*Endpoint)(nil)
	_ transport.StrayReporter    = (*Endpoint)(nil)
	_ transport.Linker           = (*Endpoint)(nil)
	_ transport.LinkNotifier     = (*Endpoint)(nil)
	_ transport.Boarder          = (*Endpoint)(nil)
	_ transport.SegmentHinter    = (*Endpoint)(nil)
)

// New returns rank's endpoint of a job of size ranks over routes: a peer
// goes by the first route that reaches it. Every job rank, rank itself
// included, must be reached by some route. New checks the routes (an
// endpoint's rank and size against its Ranks, ranks in range and not
// repeated) before it uses them, and fails without closing them; once it
// succeeds the router owns them.
func New(rank, size int, routes ...Route) (*Endpoint, error) {
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("route: rank %d of a job of size %d", rank, size)
	}
	e := &Endpoint{
		rank: rank, size: size, routes: slices.Clone(routes), jobOf: make([][]int, len(routes)),
		via: make([]int, size), local: make([]int, size), reported: make([]atomic.Bool, size),
	}
	for i := range e.via {
		e.via[i] = -1
	}
	for i := range e.routes {
		r := &e.routes[i]
		if r.Name == "" {
			r.Name = fmt.Sprintf("route%d", i)
		}
		if r.Endpoint == nil {
			return nil, fmt.Errorf("route: %s has no endpoint", r.Name)
		}
		ranks := r.Ranks
		if ranks == nil {
			ranks = make([]int, size)
			for j := range ranks {
				ranks[j] = j
			}
		}
		n, me := r.Endpoint.Size(), r.Endpoint.Rank()
		if len(ranks) != n || me < 0 || me >= n || ranks[me] != rank {
			return nil, fmt.Errorf("route: %s's endpoint is rank %d of %d, which does not make it job rank %d of its %d ranks %v",
				r.Name, me, n, rank, len(ranks), ranks)
		}
		seen := make(map[int]bool, len(ranks))
		for _, jr := range ranks {
			if jr < 0 || jr >= size || seen[jr] {
				return nil, fmt.Errorf("route: %s reaches job rank %d twice or out of range [0,%d)", r.Name, jr, size)
			}
			seen[jr] = true
		}
		e.jobOf[i] = ranks
		for local, jr := range ranks {
			if e.via[jr] < 0 {
				e.via[jr], e.local[jr] = i, local
			}
		}
	}
	var unreached []int
	for jr, i := range e.via {
		if i < 0 {
			unreached = append(unreached, jr)
		}
	}
	if len(unreached) > 0 {
		return nil, fmt.Errorf("route: no route reaches job ranks %v", unreached)
	}
	for i := range e.routes {
		if n, ok := e.routes[i].Endpoint.(transport.PeerLossNotifier); ok {
			n.OnPeerLoss(func(pe *transport.PeerError) { e.lost(i, pe) })
		}
	}
	return e, nil
}

// Rank implements transport.Endpoint: the job rank.
func (e *Endpoint) Rank() int { return e.rank }

// Size implements transport.Endpoint: the job's size.
func (e *Endpoint) Size() int { return e.size }

// Via names the route that carries messages to job rank peer (peer may
// be this rank), or "" for a rank out of range.
func (e *Endpoint) Via(peer int) string {
	if peer < 0 || peer >= e.size {
		return ""
	}
	return e.routes[e.via[peer]].Name
}

// Linked implements transport.Linker: whether peer's route has a link to
// it up (a route whose endpoint is not a transport.Linker is linked to
// every rank it reaches).
func (e *Endpoint) Linked(peer int) bool {
	if peer < 0 || peer >= e.size || peer == e.rank {
		return false
	}
	if l, ok := e.routes[e.via[peer]].Endpoint.(transport.Linker); ok {
		return l.Linked(e.local[peer])
	}
	return true
}

// OnLink implements transport.LinkNotifier: f hears, by job rank, of each
// link that comes up on the route that carries that rank's messages (a
// route that does not tell has every link up from the start).
func (e *Endpoint) OnLink(f func(peer int)) {
	for i := range e.routes {
		if n, ok := e.routes[i].Endpoint.(transport.LinkNotifier); ok {
			n.OnLink(func(local int) {
				if local < 0 || local >= len(e.jobOf[i]) {
					return
				}
				if jr := e.jobOf[i][local]; e.via[jr] == i {
					f(jr)
				}
			})
		}
	}
}

// Isend implements transport.Endpoint over peer to's route.
func (e *Endpoint) Isend(to int, tag transport.Tag, b []byte) transport.Request {
	if err := transport.CheckPeer("send", to, e.size); err != nil {
		return transport.Completed(err)
	}
	i := e.via[to]
	return e.translate(e.routes[i].Endpoint.Isend(e.local[to], tag, b), to)
}

// Irecv implements transport.Endpoint over peer from's route.
func (e *Endpoint) Irecv(from int, tag transport.Tag, b []byte) transport.Request {
	if err := transport.CheckPeer("recv", from, e.size); err != nil {
		return transport.Completed(err)
	}
	i := e.via[from]
	return e.translate(e.routes[i].Endpoint.Irecv(e.local[from], tag, b), from)
}

var _ transport.VecEndpoint = (*Endpoint)(nil)

// IsendV implements transport.VecEndpoint over peer to's route: vectored
// where that route's endpoint is a VecEndpoint, else packed into one
// buffer (transport.PackedSendV).
func (e *Endpoint) IsendV(to int, tag transport.Tag, bufs [][]byte) transport.Request {
	if err := transport.CheckPeer("send", to, e.size); err != nil {
		return transport.Completed(err)
	}
	ep := e.routes[e.via[to]].Endpoint
	if v, ok := ep.(transport.VecEndpoint); ok {
		return e.translate(v.IsendV(e.local[to], tag, bufs), to)
	}
	return e.translate(transport.PackedSendV(ep, e.local[to], tag, bufs), to)
}

// IrecvV implements transport.VecEndpoint over peer from's route, as
// IsendV does.
func (e *Endpoint) IrecvV(from int, tag transport.Tag, bufs [][]byte) transport.Request {
	if err := transport.CheckPeer("recv", from, e.size); err != nil {
		return transport.Completed(err)
	}
	ep := e.routes[e.via[from]].Endpoint
	if v, ok := ep.(transport.VecEndpoint); ok {
		return e.translate(v.IrecvV(e.local[from], tag, bufs), from)
	}
	return e.translate(transport.PackedRecvV(ep, e.local[from], tag, bufs), from)
}

// Vectored implements transport.VecEndpoint with the answer of peer's
// route's endpoint, asked with peer's rank there; false where that
// endpoint has no vectored messages. Both ends of a link take the same
// route, so they answer alike.
func (e *Endpoint) Vectored(peer int) bool {
	if peer < 0 || peer >= e.size {
		return false
	}
	v, ok := e.routes[e.via[peer]].Endpoint.(transport.VecEndpoint)
	return ok && v.Vectored(e.local[peer])
}

// translate makes r's error name job rank peer where the route numbers it
// otherwise. Where the numbers agree, or r has already succeeded, r is
// returned as it is (no allocation).
func (e *Endpoint) translate(r transport.Request, peer int) transport.Request {
	local := e.local[peer]
	if local == peer {
		return r
	}
	select {
	case <-r.Done():
		if r.Err() == nil {
			return r
		}
	default:
	}
	return &request{Request: r, local: local, peer: peer}
}

// request is a route's request whose error names the peer by job rank.
type request struct {
	transport.Request
	local, peer int
}

func (r *request) Wait(ctx context.Context) error {
	err := r.Request.Wait(ctx)
	if err == nil || r.Request.Err() == nil {
		return err // success, or ctx's error while still pending
	}
	return jobError(err, r.local, r.peer)
}

func (r *request) Err() error { return jobError(r.Request.Err(), r.local, r.peer) }

// jobError renames the peer of a PeerError at the top of err from its
// rank within the route, local, to its job rank.
func jobError(err error, local, peer int) error {
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe != err || pe.Peer != local {
		return err
	}
	return &transport.PeerError{Op: pe.Op, Peer: peer, Err: pe.Err}
}

// SegmentBytes implements transport.SegmentHinter with the answer of the
// endpoint of peer's route, asked with peer's rank there; 0 where that
// endpoint gives none.
func (e *Endpoint) SegmentBytes(peer int) int {
	if peer < 0 || peer >= e.size {
		return 0
	}
	i := e.via[peer]
	if sh, ok := e.routes[i].Endpoint.(transport.SegmentHinter); ok {
		return sh.SegmentBytes(e.local[peer])
	}
	return 0
}

// Board implements transport.Boarder where one route reaches every member
// and its endpoint offers boards: the board is that endpoint's, asked with
// the members' ranks within the route, and Lost's errors name job ranks.
// Members split between routes (another host) share no memory: an error.
func (e *Endpoint) Board(id uint64, ranks []int, size int) (transport.Board, error) {
	if len(ranks) == 0 {
		return nil, errors.New("route: board of no members")
	}
	for _, r := range ranks {
		if err := transport.CheckPeer("board", r, e.size); err != nil {
			return nil, err
		}
	}
	i := e.via[ranks[0]]
	bd, ok := e.routes[i].Endpoint.(transport.Boarder)
	if !ok {
		return nil, fmt.Errorf("route: %w: %s offers none", transport.ErrNoBoard, e.routes[i].Name)
	}
	local := make([]int, len(ranks))
	for k, r := range ranks {
		if e.via[r] != i {
			return nil, fmt.Errorf("route: %w: members %d and %d go by %s and %s, no memory in common",
				transport.ErrNoBoard, ranks[0], r, e.routes[i].Name, e.routes[e.via[r]].Name)
		}
		local[k] = e.local[r]
	}
	b, err := bd.Board(id, local, size)
	if err != nil {
		return nil, fmt.Errorf("route: %s: %w", e.routes[i].Name, err)
	}
	return &board{Board: b, jobOf: e.jobOf[i]}, nil
}

// board is a route's board: Lost names job ranks.
type board struct {
	transport.Board
	jobOf []int
}

func (b *board) Lost(m int) error {
	err := b.Board.Lost(m)
	var pe *transport.PeerError
	if err == nil || !errors.As(err, &pe) || pe != err || pe.Peer < 0 || pe.Peer >= len(b.jobOf) {
		return err
	}
	return jobError(err, pe.Peer, b.jobOf[pe.Peer])
}

// OnPeerLoss implements transport.PeerLossNotifier: f hears of each lost
// peer once, by job rank, from whichever route noticed first.
func (e *Endpoint) OnPeerLoss(f func(*transport.PeerError)) { e.onLoss.Store(&f) }

// lost reports a loss that route i noticed.
func (e *Endpoint) lost(i int, pe *transport.PeerError) {
	ranks := e.jobOf[i]
	if pe.Peer < 0 || pe.Peer >= len(ranks) {
		return
	}
	jr := ranks[pe.Peer]
	f := e.onLoss.Load()
	if f == nil || e.reported[jr].Swap(true) {
		return
	}
	(*f)(&transport.PeerError{Op: pe.Op, Peer: jr, Err: pe.Err})
}

// OnStray implements transport.StrayReporter on every route that has it;
// report hears the sender's job rank.
func (e *Endpoint) OnStray(finished func(transport.Tag) bool, report func(from int, tag transport.Tag, head []byte)) {
	for i, r := range e.routes {
		sr, ok := r.Endpoint.(transport.StrayReporter)
		if !ok {
			continue
		}
		ranks := e.jobOf[i]
		sr.OnStray(finished, func(from int, tag transport.Tag, head []byte) {
			if from >= 0 && from < len(ranks) {
				from = ranks[from]
			}
			report(from, tag, head)
		})
	}
}

// Retire implements transport.StrayReporter on every route that has it.
func (e *Endpoint) Retire(tag transport.Tag) {
	for _, r := range e.routes {
		if sr, ok := r.Endpoint.(transport.StrayReporter); ok {
			sr.Retire(tag)
		}
	}
}

// Close implements transport.Endpoint: it closes every route and returns
// their errors joined. It is safe to call more than once.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		var errs []error
		for _, r := range e.routes {
			if err := r.Endpoint.Close(); err != nil {
				errs = append(errs, fmt.Errorf("route %s: close: %w", r.Name, err))
			}
		}
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}
