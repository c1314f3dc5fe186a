package backend

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport/mem"
)

// blockComm is a backend whose collectives block until released.
type blockComm struct {
	entered chan struct{} // a Block began
	release chan struct{} // Block returns once it is closed
	mu      sync.Mutex
	aborts  []int
}

func newBlockComm() *blockComm {
	return &blockComm{entered: make(chan struct{}, 4), release: make(chan struct{})}
}

func (b *blockComm) Name() string                 { return "fake" }
func (b *blockComm) Memory() Memory               { return Host }
func (b *blockComm) Takes(*Call) bool             { return true }
func (b *blockComm) Start(*Call) (Request, error) { return nil, errors.New("fake: Start") }
func (b *blockComm) Split(int, int) (Comm, error) { return nil, nil }
func (b *blockComm) Close() error                 { return nil }
func (b *blockComm) Blocks(*Call) bool            { return true }
func (b *blockComm) Abort(code int) {
	b.mu.Lock()
	b.aborts = append(b.aborts, code)
	b.mu.Unlock()
}

func (b *blockComm) Block(*Call) error {
	b.entered <- struct{}{}
	<-b.release
	return nil
}

func (b *blockComm) aborted() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.aborts...)
}

// blockWorld is two ranks' groups over goccl's in-process links, rank 0's
// on be; rank 1 issues nothing and only answers. fatal collects what rank
// 0's watchdog reports.
func blockWorld(t *testing.T, be *blockComm) (g0 *Group, fatal func() []error) {
	t.Helper()
	eps := mem.New(2)
	var mu sync.Mutex
	var got []error
	l := func(r int) Links {
		return Links{EP: eps[r], Rank: r, Ranks: []int{0, 1}, Fatal: func(err error) {
			mu.Lock()
			got = append(got, err)
			mu.Unlock()
		}}
	}
	g0 = NewWorld(be, l(0))
	g1 := NewWorld(newBlockComm(), l(1))
	t.Cleanup(func() {
		g0.Close()
		g1.Close()
		for _, ep := range eps {
			ep.Close()
		}
	})
	return g0, func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), got...)
	}
}

func blockCall(g *Group) *Call {
	return &Call{Coll: AllReduce, Send: make([]byte, 8), Recv: make([]byte, 8), DType: reduceop.Float32, Op: reduceop.Sum, Order: g.Next()}
}

// A blocking call that completes: no report, no abort, the next call's
// turn, and the call record cleared.
func TestBlockCompletes(t *testing.T) {
	be := newBlockComm()
	g, fatal := blockWorld(t, be)
	close(be.release)
	c := blockCall(g)
	if err := g.Run(context.Background(), c, nil, make(chan struct{})); err != nil {
		t.Fatal(err)
	}
	if c.Recv != nil || c.Order != 0 {
		t.Errorf("Run left the call record %+v, want it zeroed", c)
	}
	if got := g.next.Load(); got != 2 {
		t.Errorf("next call's turn %d, want 2", got)
	}
	if f, a := fatal(), be.aborted(); len(f) != 0 || len(a) != 0 {
		t.Errorf("reports %v, aborts %v: want none", f, a)
	}
}

// At the deadline of a call blocked in the library, the watchdog names
// the rank behind, reports it and aborts the job; the call returns that
// error once the library lets it go.
func TestBlockDeadlineNamesBehind(t *testing.T) {
	be := newBlockComm()
	g, fatal := blockWorld(t, be)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, blockCall(g), nil, make(chan struct{})) }()
	<-be.entered
	deadline := time.Now().Add(10 * time.Second)
	for len(be.aborted()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a := be.aborted(); len(a) != 1 || a[0] != 1 {
		t.Fatalf("aborts %v, want [1]", a)
	}
	f := fatal()
	if len(f) != 1 {
		t.Fatalf("reports %v, want one", f)
	}
	for _, s := range []string{"allreduce", "rank 1 is behind", "ending the job"} {
		if !strings.Contains(f[0].Error(), s) {
			t.Errorf("report %q does not say %q", f[0], s)
		}
	}
	close(be.release)
	err := <-done
	var pe *PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run: %v, want the report (a PeerError naming rank 1, wrapping DeadlineExceeded)", err)
	}
}

// A communicator aborted under a blocking call ends the job, with the
// difference the fingerprint ring found where it found one.
func TestBlockStopped(t *testing.T) {
	be := newBlockComm()
	g, fatal := blockWorld(t, be)
	why := errors.New("calls differ: group rank 1 made broadcast where this rank made allreduce")
	g.differ.Store(&why)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background(), blockCall(g), nil, stop) }()
	<-be.entered
	close(stop)
	deadline := time.Now().Add(10 * time.Second)
	for len(be.aborted()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(be.release)
	err := <-done
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "broadcast") {
		t.Errorf("Run: %v, want ErrStopped with the difference", err)
	}
	if f := fatal(); len(f) != 1 || len(be.aborted()) != 1 {
		t.Errorf("reports %v, aborts %v: want one of each", f, be.aborted())
	}
}

// A call whose communicator was aborted before it blocks never enters
// the library, and ends nothing.
func TestBlockStoppedBefore(t *testing.T) {
	be := newBlockComm()
	g, fatal := blockWorld(t, be)
	stop := make(chan struct{})
	close(stop)
	if err := g.Run(context.Background(), blockCall(g), nil, stop); !errors.Is(err, ErrStopped) {
		t.Errorf("Run: %v, want ErrStopped", err)
	}
	select {
	case <-be.entered:
		t.Error("the call entered the library")
	default:
	}
	time.Sleep(20 * time.Millisecond) // the stop watcher had its chance
	if f, a := fatal(), be.aborted(); len(f) != 0 || len(a) != 0 {
		t.Errorf("reports %v, aborts %v: want none", f, a)
	}
}
