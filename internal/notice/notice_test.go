package notice_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/notice"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

const tag = transport.Tag(77)

// links is an endpoint whose links come up when the test says.
type links struct {
	transport.Endpoint
	mu     sync.Mutex
	up     map[int]bool
	onLink func(int)
}

func (l *links) Linked(q int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up[q]
}

func (l *links) OnLink(f func(int)) { l.onLink = f }

func (l *links) link(q int) {
	l.mu.Lock()
	l.up[q] = true
	l.mu.Unlock()
	l.onLink(q)
}

// Every peer's notice is heard once, by the peer it came from.
func TestListenEveryPeer(t *testing.T) {
	eps := mem.New(4)
	defer func() {
		for _, ep := range eps {
			ep.Close()
		}
	}()
	heard := make(chan int, 8)
	l := start(notice.New(eps[0], eps[0], tag, 3, func(q int) { heard <- q }))
	defer l.Wait()
	defer l.Stop()
	if got := sorted(l.Posted()); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("posted from %v, want every peer", got)
	}
	for _, q := range []int{2, 3, 1} {
		if err := eps[q].Isend(0, tag, []byte{byte(q), 0, 0}).Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := <-heard; got != q {
			t.Fatalf("heard %d, want %d", got, q)
		}
		if r := l.Get(q); r == nil || r.Buf[0] != byte(q) {
			t.Fatalf("peer %d's receive: %+v", q, r)
		}
	}
	select {
	case q := <-heard:
		t.Fatalf("heard %d twice", q)
	case <-time.After(10 * time.Millisecond): // not a timing assertion: only gives a wrong second report the chance to show
	}
}

// With links made on demand, a receive is posted only from a linked
// peer, when its link comes up; a notice from it is then heard.
func TestListenOnlyLinks(t *testing.T) {
	eps := mem.New(5)
	defer func() {
		for _, ep := range eps {
			ep.Close()
		}
	}()
	lk := &links{Endpoint: eps[0], up: map[int]bool{3: true}}
	heard := make(chan int, 8)
	l := start(notice.New(eps[0], lk, tag, 1, func(q int) { heard <- q }))
	defer l.Wait()
	defer l.Stop()
	if got := l.Posted(); !slices.Equal(got, []int{3}) {
		t.Fatalf("posted from %v, want only the linked peer 3", got)
	}
	if l.Get(1) != nil {
		t.Fatal("a receive from an unlinked peer")
	}
	lk.link(1)
	lk.link(1) // a link reported twice posts once
	lk.link(0) // and never from this rank itself
	if got := sorted(l.Posted()); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("posted from %v", got)
	}
	eps[1].Isend(0, tag, []byte{9})
	if q := <-heard; q != 1 {
		t.Fatalf("heard %d", q)
	}
}

// A receive that fails (the endpoint closed) is reported too, and Stop
// ends the goroutine.
func TestListenClose(t *testing.T) {
	eps := mem.New(2)
	heard := make(chan int, 2)
	l := start(notice.New(eps[0], eps[0], tag, 4, func(q int) { heard <- q }))
	eps[0].Close()
	if q := <-heard; q != 1 || l.Get(1).Req.Err() == nil {
		t.Fatalf("heard %d, err %v", q, l.Get(1).Req.Err())
	}
	l.Stop()
	l.Stop()
	l.Wait()
	eps[1].Close()
}

func sorted(qs []int) []int { slices.Sort(qs); return qs }

func start(l *notice.Listener) *notice.Listener { l.Start(); return l }
