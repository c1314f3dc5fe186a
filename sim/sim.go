package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/algo"
)

// ErrDeadlock is returned by Run when every rank still running waits for
// something that no event can bring.
var ErrDeadlock = errors.New("sim: deadlock: every running rank waits and nothing is in flight")

// ErrLength is returned (wrapped) by a receive whose message does not have
// the length of the buffer posted for it.
var ErrLength = errors.New("sim: message length differs from receive buffer")

// ReduceFunc computes dst[i] = dst[i] op src[i] over raw element bytes.
type ReduceFunc func(dst, src []byte) error

// Config describes a simulated group of ranks and its machine.
type Config struct {
	Ranks    int      // number of ranks, at least 1
	ElemSize int      // bytes per element, reported by Peers.ElemSize; zero means 4
	Topology Topology // where the ranks live and how they connect
	Gamma    float64  // seconds per byte reduced

	// SizeOnly runs without data: sends carry only their lengths and
	// reductions are charged, not computed. The buffers an algorithm sees
	// (from RunCollective, and its scratch) are address space that faults
	// on any access, shared by all ranks, so thousands of ranks of a
	// gigabyte cost no memory.
	SizeOnly bool
	// Reduce is the reducer behind Peers.Reduce when SizeOnly is false.
	Reduce ReduceFunc
	// Record keeps every send, receive and reduction in Result.Events,
	// for a transcript or a trace.
	Record bool
}

// EventKind says what an Event is.
type EventKind uint8

// The kinds of recorded events.
const (
	Send   EventKind = iota + 1 // a message leaving Rank for Peer
	Recv                        // a receive on Rank of a message from Peer
	Reduce                      // a reduction of Bytes on Rank
)

// Event is one recorded send, receive or reduction, with its virtual
// times in seconds.
type Event struct {
	Kind       EventKind
	Rank, Peer int // Peer is the other end of a send or receive
	Bytes      int
	// Step is the send's logical clock, as algotest numbers it: one more
	// than the largest step its rank had seen complete when it started.
	Step       int
	Start, End float64 // a send from start of transfer to arrival; a receive from posting (or transfer start, if later) to completion
	seq        int64   // order of recording, to sort stably
}

// Result is what a run observed.
type Result struct {
	Time    float64   // virtual seconds until the last rank returned
	Finish  []float64 // by rank: when it returned
	Msgs    int64     // messages sent
	Bytes   int64     // payload bytes sent
	Events  []Event   // with Config.Record: sends, receives and reductions in order of start
	Wrong   int64     // RunCollective with data: elements that differ from the reference
	Elapsed float64   // wall-clock seconds the simulation took; not deterministic
	// Links is how many pairs of ranks exchanged a message, either way:
	// the links a transport that connects on demand makes (goccl's lazy
	// TCP links). MaxLinks is the most of them at any one rank.
	Links    int64
	MaxLinks int
}

// Run runs fn on every rank of cfg's group under the virtual clock and
// returns what it observed, with the first error of any rank. A rank's
// error ends the others' waits with ErrAborted-wrapped errors.
//
// The ranks are goroutines, but they never run while the clock moves: a
// rank runs until it waits (Request.Wait on an unfinished request, or
// Reduce), and when every rank waits the scheduler takes the operations
// they started, in rank order, then advances the clock to the next event
// (ties in the order the events were made) and wakes the ranks it
// finished. So the same run gives the same events and times whatever the
// Go scheduler does.
func Run(ctx context.Context, cfg Config, fn func(ctx context.Context, p algo.Peers) error) (*Result, error) {
	s, err := newSched(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return s.run(fn)
}

// ErrAborted is wrapped by the errors of ranks whose wait was ended
// because another rank failed or the context ended.
var ErrAborted = errors.New("sim: aborted")

type opKind uint8

const (
	opSend opKind = iota + 1
	opRecv
)

// op is a send or receive a rank started and the scheduler has not yet
// taken.
type op struct {
	kind opKind
	peer int
	b    []byte
	req  *request
}

// request is a started send or receive. Algorithms may hold many sends
// at once (the tree allreduce keeps one per segment until it ends), so a
// send's request is kept small and a receive's fields live apart.
type request struct {
	r          *rank
	err        error
	step       int // a send's step; a receive's message's step once matched
	done       bool
	send       bool
	*recvState // nil for a send
}

// recvState is what a receive request needs besides a send's fields.
type recvState struct {
	peer   int
	b      []byte
	data   []byte  // the matched message's bytes (not SizeOnly)
	posted float64 // when the scheduler took it
	ev     int     // index in Result.Events, or -1
}

// message is a sent message not yet matched with a receive.
type message struct {
	bytes  int
	data   []byte
	step   int
	start  float64
	arrive float64
}

// pairQ holds one ordered pair's unmatched messages or receives (never
// both at once: a match removes both).
type pairQ struct {
	msgs  []message
	recvs []*request
}

type rank struct {
	s      *sched
	id     int
	wake   chan struct{}
	ops    []op
	waitOn *request // the request it waits for, or nil
	reduce int      // bytes it is reducing, when it waits for a reduction
	clock  int
	done   bool // returned
	err    error
	finish float64
	q      map[int]*pairQ // by sender: messages for this rank
	out    map[int]*outQ  // by receiver: messages from this rank not yet sent
}

type event struct {
	t    float64
	seq  int64
	req  *request // a receive completing, or nil
	fl   *flow    // a message leaving its sender, or nil
	ver  uint32   // fl's pace when this event was made
	rank int32    // a reduction ending, when req and fl are nil
}

type sched struct {
	ctx     context.Context
	cfg     Config
	n       int
	ranks   []*rank
	net     *network
	running atomic.Int64
	now     float64
	seq     int64
	heap    []event
	ran     []int // ranks that ran since the scheduler last looked
	wakeSet []int
	left    int // ranks that have not returned
	aborted error
	doneCh  chan struct{}
	res     Result
	mem     *reserved
	pairs   map[[2]int32]struct{} // pairs that exchanged a message (Result.Links)
	degree  []int                 // by rank: its pairs

	markGen  uint64
	affected []*flow
}

func newSched(ctx context.Context, cfg Config) (*sched, error) {
	if cfg.Ranks < 1 {
		return nil, fmt.Errorf("sim: %d ranks", cfg.Ranks)
	}
	if cfg.ElemSize == 0 {
		cfg.ElemSize = 4
	}
	if cfg.ElemSize < 0 {
		return nil, fmt.Errorf("sim: element size %d", cfg.ElemSize)
	}
	if err := cfg.Topology.validate(cfg.Ranks); err != nil {
		return nil, fmt.Errorf("sim: topology: %w", err)
	}
	if cfg.Gamma < 0 || math.IsNaN(cfg.Gamma) || math.IsInf(cfg.Gamma, 0) {
		return nil, fmt.Errorf("sim: gamma %g", cfg.Gamma)
	}
	s := &sched{ctx: ctx, cfg: cfg, n: cfg.Ranks, net: newNetwork(cfg.Topology, cfg.Ranks), left: cfg.Ranks, doneCh: make(chan struct{})}
	s.ranks = make([]*rank, s.n)
	for i := range s.ranks {
		s.ranks[i] = &rank{s: s, id: i, wake: make(chan struct{}, 1), q: map[int]*pairQ{}, out: map[int]*outQ{}}
	}
	if cfg.SizeOnly {
		s.mem = &reserved{}
	}
	return s, nil
}

func (s *sched) run(fn func(ctx context.Context, p algo.Peers) error) (*Result, error) {
	start := nowWall()
	defer s.mem.free()
	s.running.Store(int64(s.n))
	s.ran = make([]int, s.n)
	for i := range s.ran {
		s.ran[i] = i
	}
	var wg sync.WaitGroup
	for _, rk := range s.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p algo.Peers = &peer{rk}
			if s.cfg.SizeOnly {
				p = &sizePeer{peer{rk}}
			}
			err := fn(s.ctx, p)
			if err != nil {
				err = fmt.Errorf("rank %d: %w", rk.id, err)
			}
			rk.exit(err)
		}()
	}
	<-s.doneCh
	wg.Wait()
	s.res.Elapsed = nowWall() - start
	for _, d := range s.degree {
		s.res.MaxLinks = max(s.res.MaxLinks, d)
	}
	s.res.Finish = make([]float64, s.n)
	for i, rk := range s.ranks {
		s.res.Finish[i] = rk.finish
		s.res.Time = max(s.res.Time, rk.finish)
	}
	if s.cfg.Record {
		slices.SortStableFunc(s.res.Events, func(a, b Event) int {
			return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.seq, b.seq))
		})
	}
	if s.aborted != nil && !errors.Is(s.aborted, ErrAborted) {
		return &s.res, s.aborted // a deadlock or the context: the root cause
	}
	for _, rk := range s.ranks {
		if rk.err != nil {
			return &s.res, rk.err
		}
	}
	return &s.res, nil
}

// block parks the calling rank until the scheduler wakes it. The last rank
// to block runs the scheduler itself.
func (rk *rank) block() {
	s := rk.s
	if s.aborted != nil {
		return
	}
	if s.running.Add(-1) == 0 && s.schedule(rk) {
		return
	}
	<-rk.wake
}

// exit records that rk's function returned.
func (rk *rank) exit(err error) {
	s := rk.s
	rk.done, rk.err = true, err
	rk.finish = s.now
	if s.running.Add(-1) == 0 {
		s.schedule(nil)
	}
}

// schedule runs while no rank runs: it takes the operations of the ranks
// that ran, moves the clock, and wakes the ranks whose waits ended. It
// reports whether self is among them (self then goes on without parking).
func (s *sched) schedule(self *rank) bool {
	for {
		if s.aborted != nil {
			// Only returning ranks get here after an abort.
			if s.left = s.countLeft(); s.left == 0 {
				close(s.doneCh)
			}
			return false
		}
		slices.Sort(s.ran)
		for _, id := range s.ran {
			rk := s.ranks[id]
			s.take(rk)
			switch {
			case rk.done:
				s.left--
				if rk.err != nil && s.aborted == nil {
					s.aborted = fmt.Errorf("%w: %w", ErrAborted, rk.err)
				}
			case rk.reduce > 0:
				s.push(event{t: s.now + float64(rk.reduce)*s.cfg.Gamma, rank: int32(id)})
				if s.cfg.Record {
					s.record(Event{Kind: Reduce, Rank: id, Peer: -1, Bytes: rk.reduce, Start: s.now, End: s.now + float64(rk.reduce)*s.cfg.Gamma})
				}
			case rk.waitOn != nil && rk.waitOn.done:
				s.wakeSet = append(s.wakeSet, id)
			}
		}
		s.ran = s.ran[:0]
		if s.aborted == nil {
			if err := s.ctx.Err(); err != nil {
				s.aborted = context.Cause(s.ctx)
			}
		}
		if s.aborted == nil && len(s.wakeSet) == 0 {
			if len(s.heap) == 0 {
				if s.left == 0 {
					close(s.doneCh)
					return false
				}
				s.aborted = ErrDeadlock
			} else {
				s.advance()
			}
		}
		if s.aborted != nil {
			s.wakeSet = s.wakeSet[:0]
			for _, rk := range s.ranks {
				if !rk.done {
					s.wakeSet = append(s.wakeSet, rk.id)
				}
			}
			if len(s.wakeSet) == 0 {
				close(s.doneCh)
				return false
			}
		}
		if len(s.wakeSet) > 0 {
			return s.wakeAll(self)
		}
	}
}

func (s *sched) countLeft() int {
	k := 0
	for _, rk := range s.ranks {
		if !rk.done {
			k++
		}
	}
	return k
}

// wakeAll starts the ranks of the wake set.
func (s *sched) wakeAll(self *rank) bool {
	s.running.Add(int64(len(s.wakeSet)))
	s.ran, s.wakeSet = s.wakeSet, s.ran[:0]
	mine := false
	for _, id := range s.ran {
		rk := s.ranks[id]
		rk.waitOn, rk.reduce = nil, 0
		if rk == self {
			mine = true
			continue
		}
		rk.wake <- struct{}{}
	}
	return mine
}

// advance moves the clock to the earliest event and applies every event
// of that time.
func (s *sched) advance() {
	t := s.heap[0].t
	s.now = t
	for len(s.heap) > 0 && s.heap[0].t == t {
		e := s.pop()
		switch {
		case e.fl != nil:
			if e.ver == e.fl.ver {
				s.finishFlow(e.fl)
			}
		case e.req != nil:
			s.complete(e.req)
		default:
			s.wakeSet = append(s.wakeSet, int(e.rank))
		}
	}
}

// complete finishes request q and wakes its rank if it waits for it.
func (s *sched) complete(q *request) {
	q.done = true
	if q.recvState != nil && q.data != nil && q.err == nil {
		copy(q.b, q.data)
		q.data = nil
	}
	if q.r.waitOn == q {
		s.wakeSet = append(s.wakeSet, q.r.id)
	}
}

// take processes the operations rk started since it last ran.
func (s *sched) take(rk *rank) {
	for i := range rk.ops {
		o := &rk.ops[i]
		if o.kind == opSend {
			s.send(rk, o.peer, o.b, o.req)
		} else {
			s.recv(rk, o.peer, o.req)
		}
		*o = op{}
	}
	rk.ops = rk.ops[:0]
}

func (s *sched) send(rk *rank, to int, b []byte, q *request) {
	s.res.Msgs++
	pair := [2]int32{int32(min(rk.id, to)), int32(max(rk.id, to))}
	if _, ok := s.pairs[pair]; !ok {
		if s.pairs == nil {
			s.pairs, s.degree = make(map[[2]int32]struct{}), make([]int, s.n)
		}
		s.pairs[pair] = struct{}{}
		s.degree[rk.id]++
		s.degree[to]++
		s.res.Links++
	}
	s.res.Bytes += int64(len(b))
	m := outMsg{to: to, bytes: len(b), step: q.step, req: q}
	if !s.cfg.SizeOnly {
		m.data = append([]byte(nil), b...)
	}
	s.enqueue(rk, m)
}

// deliver hands a message that has left rank from to its receiver: it
// completes the receive posted for it, or waits for one.
func (s *sched) deliver(from int, msg message, to int) {
	pq := s.ranks[to].pair(from)
	if len(pq.recvs) > 0 {
		r := pq.recvs[0]
		pq.recvs[0] = nil
		pq.recvs = pq.recvs[1:]
		s.match(r, msg)
		return
	}
	pq.msgs = append(pq.msgs, msg)
}

func (s *sched) recv(rk *rank, from int, q *request) {
	q.posted = s.now
	q.ev = -1
	if s.cfg.Record {
		q.ev = len(s.res.Events)
		s.record(Event{Kind: Recv, Rank: rk.id, Peer: from, Bytes: len(q.b), Start: s.now})
	}
	pq := rk.pair(from)
	if len(pq.msgs) > 0 {
		msg := pq.msgs[0]
		pq.msgs[0] = message{}
		pq.msgs = pq.msgs[1:]
		s.match(q, msg)
		return
	}
	pq.recvs = append(pq.recvs, q)
}

// match pairs receive q with its message and schedules its completion.
func (s *sched) match(q *request, msg message) {
	q.step = msg.step
	if msg.bytes != len(q.b) {
		q.err = fmt.Errorf("%w: %d bytes from rank %d into %d", ErrLength, msg.bytes, q.peer, len(q.b))
	}
	q.data = msg.data
	t := max(msg.arrive, s.now)
	if q.ev >= 0 {
		e := &s.res.Events[q.ev]
		e.Start, e.End, e.Step = max(q.posted, msg.start), t, msg.step
	}
	s.push(event{t: t, req: q})
}

func (rk *rank) pair(from int) *pairQ {
	pq := rk.q[from]
	if pq == nil {
		pq = &pairQ{}
		rk.q[from] = pq
	}
	return pq
}

func (s *sched) record(e Event) {
	e.seq = int64(len(s.res.Events))
	s.res.Events = append(s.res.Events, e)
}

// The event queue: a binary heap ordered by time, then by creation.

func (s *sched) push(e event) {
	s.seq++
	e.seq = s.seq
	h := append(s.heap, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !less(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	s.heap = h
}

func (s *sched) pop() event {
	h := s.heap
	e := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{}
	h = h[:last]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < len(h) && less(&h[l], &h[m]) {
			m = l
		}
		if r := l + 1; r < len(h) && less(&h[r], &h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	s.heap = h
	return e
}

func less(a, b *event) bool {
	if a.t != b.t {
		return a.t < b.t
	}
	return a.seq < b.seq
}
