package algotest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/algo"
)

// ErrDeadlock is returned by Run when every rank still running waits for a
// message that no rank can send any more.
var ErrDeadlock = errors.New("algotest: deadlock: every running rank waits for a message")

// ErrLength is returned (wrapped) when a message does not have the length
// of the receive buffer posted for it.
var ErrLength = errors.New("algotest: message length differs from receive buffer")

// ReduceFunc computes dst[i] = dst[i] op src[i] over raw element bytes.
type ReduceFunc func(dst, src []byte) error

// World describes an in-process group of ranks. The zero Timeout means one
// minute.
type World struct {
	Size     int        // number of ranks, at least 1
	ElemSize int        // bytes per element, reported by Peers.ElemSize
	Reduce   ReduceFunc // the reducer behind Peers.Reduce; nil fails reductions
	Record   bool       // record a transcript in Stats.Transcript
	Timeout  time.Duration
}

// Count is a number of messages and the bytes they carried.
type Count struct {
	Msgs  int
	Bytes int
}

// Event is one message of a transcript.
type Event struct {
	Step     int // logical clock of the send (see the package doc)
	From, To int
	Bytes    int
	seq      int // per-pair order, for a stable sort
}

// String formats e as a transcript line.
func (e Event) String() string {
	return fmt.Sprintf("step %d: rank %d -> rank %d: %d bytes", e.Step, e.From, e.To, e.Bytes)
}

// Stats is what a run observed.
type Stats struct {
	Sent, Recv []Count // indexed by rank
	Transcript []Event // sorted by step, sender, receiver, send order; nil unless World.Record
}

// TranscriptText returns the transcript, one event a line.
func (s *Stats) TranscriptText() string {
	var b strings.Builder
	for _, e := range s.Transcript {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Run runs fn on size ranks with elements of elemSize bytes and the given
// reducer, and returns the first error of any rank.
func Run(size, elemSize int, reduce ReduceFunc, fn func(ctx context.Context, p algo.Peers) error) error {
	_, err := World{Size: size, ElemSize: elemSize, Reduce: reduce}.Run(context.Background(), fn)
	return err
}

type message struct {
	data []byte
	step int
}

// box holds the messages from one rank to another.
type box struct {
	sent, recvd int             // sequence numbers of the next send and the next posted receive
	msgs        map[int]message // sent but not yet consumed, by sequence number
	waiters     map[int]chan struct{}
}

type network struct {
	w      World
	mu     sync.Mutex
	boxes  [][]*box // [from][to]
	active int      // ranks that have not returned
	waitN  int      // ranks blocked in Wait on an absent message
	cancel context.CancelCauseFunc
	stats  Stats
	clock  []int
}

// Run runs fn on every rank of w and returns what it observed, with the
// first error of any rank. A rank's error cancels the context of the others.
func (w World) Run(ctx context.Context, fn func(ctx context.Context, p algo.Peers) error) (*Stats, error) {
	if w.Size < 1 {
		return nil, fmt.Errorf("algotest: world size %d", w.Size)
	}
	if w.Timeout <= 0 {
		w.Timeout = time.Minute
	}
	ctx, cancelT := context.WithTimeout(ctx, w.Timeout)
	defer cancelT()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	nw := &network{w: w, cancel: cancel, active: w.Size, clock: make([]int, w.Size)}
	nw.boxes = make([][]*box, w.Size)
	for i := range nw.boxes {
		nw.boxes[i] = make([]*box, w.Size)
		for j := range nw.boxes[i] {
			nw.boxes[i][j] = &box{msgs: map[int]message{}, waiters: map[int]chan struct{}{}}
		}
	}
	nw.stats.Sent = make([]Count, w.Size)
	nw.stats.Recv = make([]Count, w.Size)
	errs := make([]error, w.Size)
	var wg sync.WaitGroup
	for r := 0; r < w.Size; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fn(ctx, &peer{nw: nw, rank: r})
			if err != nil {
				err = fmt.Errorf("rank %d: %w", r, err)
				cancel(err)
			}
			errs[r] = err
			nw.mu.Lock()
			nw.active--
			nw.checkDeadlock()
			nw.mu.Unlock()
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		// A deadlock or timeout is the root cause; rank errors follow from it.
		if errors.Is(err, ErrDeadlock) || errors.Is(err, context.DeadlineExceeded) {
			return &nw.stats, err
		}
	}
	for _, err := range errs {
		if err != nil {
			return &nw.stats, err
		}
	}
	if w.Record {
		sort.SliceStable(nw.stats.Transcript, func(i, j int) bool {
			a, b := nw.stats.Transcript[i], nw.stats.Transcript[j]
			if a.Step != b.Step {
				return a.Step < b.Step
			}
			if a.From != b.From {
				return a.From < b.From
			}
			if a.To != b.To {
				return a.To < b.To
			}
			return a.seq < b.seq
		})
	}
	return &nw.stats, nil
}

// checkDeadlock cancels the run if every active rank is blocked. nw.mu is held.
func (nw *network) checkDeadlock() {
	if nw.active > 0 && nw.waitN == nw.active {
		nw.cancel(ErrDeadlock)
	}
}

type peer struct {
	nw   *network
	rank int
}

var _ algo.Peers = (*peer)(nil)

func (p *peer) Rank() int     { return p.rank }
func (p *peer) Size() int     { return p.nw.w.Size }
func (p *peer) ElemSize() int { return p.nw.w.ElemSize }

func (p *peer) Reduce(dst, src []byte) error {
	if p.nw.w.Reduce == nil {
		return errors.New("algotest: no reducer")
	}
	if len(dst) != len(src) || (p.nw.w.ElemSize > 0 && len(dst)%p.nw.w.ElemSize != 0) {
		return fmt.Errorf("algotest: reduce of %d bytes into %d", len(src), len(dst))
	}
	return p.nw.w.Reduce(dst, src)
}

type doneReq struct{ err error }

func (r doneReq) Wait(context.Context) error { return r.err }

type sendReq struct {
	p    *peer
	step int
}

func (r *sendReq) Wait(context.Context) error {
	r.p.nw.mu.Lock()
	c := &r.p.nw.clock[r.p.rank]
	*c = max(*c, r.step)
	r.p.nw.mu.Unlock()
	return nil
}

func (p *peer) Isend(to int, b []byte) algo.Request {
	nw := p.nw
	if to < 0 || to >= nw.w.Size {
		return doneReq{fmt.Errorf("algotest: send to rank %d of %d", to, nw.w.Size)}
	}
	data := append([]byte(nil), b...)
	nw.mu.Lock()
	defer nw.mu.Unlock()
	bx := nw.boxes[p.rank][to]
	step := nw.clock[p.rank] + 1
	seq := bx.sent
	bx.sent++
	bx.msgs[seq] = message{data: data, step: step}
	nw.stats.Sent[p.rank].Msgs++
	nw.stats.Sent[p.rank].Bytes += len(b)
	if nw.w.Record {
		nw.stats.Transcript = append(nw.stats.Transcript, Event{Step: step, From: p.rank, To: to, Bytes: len(b), seq: seq})
	}
	if ch, ok := bx.waiters[seq]; ok {
		delete(bx.waiters, seq)
		nw.waitN--
		close(ch)
	}
	return &sendReq{p: p, step: step}
}

type recvReq struct {
	p    *peer
	from int
	seq  int
	b    []byte
	done bool
	err  error
}

func (p *peer) Irecv(from int, b []byte) algo.Request {
	nw := p.nw
	if from < 0 || from >= nw.w.Size {
		return doneReq{fmt.Errorf("algotest: recv from rank %d of %d", from, nw.w.Size)}
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	bx := nw.boxes[from][p.rank]
	seq := bx.recvd
	bx.recvd++
	return &recvReq{p: p, from: from, seq: seq, b: b}
}

func (r *recvReq) Wait(ctx context.Context) error {
	if r.done {
		return r.err
	}
	nw := r.p.nw
	bx := nw.boxes[r.from][r.p.rank]
	for {
		nw.mu.Lock()
		if m, ok := bx.msgs[r.seq]; ok {
			delete(bx.msgs, r.seq)
			r.done = true
			if len(m.data) != len(r.b) {
				r.err = fmt.Errorf("%w: %d bytes from rank %d into %d", ErrLength, len(m.data), r.from, len(r.b))
			} else {
				copy(r.b, m.data)
				nw.stats.Recv[r.p.rank].Msgs++
				nw.stats.Recv[r.p.rank].Bytes += len(m.data)
				c := &nw.clock[r.p.rank]
				*c = max(*c, m.step)
			}
			nw.mu.Unlock()
			return r.err
		}
		ch := make(chan struct{})
		bx.waiters[r.seq] = ch
		nw.waitN++
		nw.checkDeadlock()
		nw.mu.Unlock()
		select {
		case <-ch:
			// The message has arrived; loop to take it.
		case <-ctx.Done():
			nw.mu.Lock()
			if bx.waiters[r.seq] == ch {
				delete(bx.waiters, r.seq)
				nw.waitN--
			}
			nw.mu.Unlock()
			return context.Cause(ctx)
		}
	}
}
