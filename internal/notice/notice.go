// Package notice keeps one receive posted from each linked peer on one
// tag, and reports each that arrives: how a communicator hears a peer's
// abort notice while it is blocked waiting on someone else.
//
// A notice can only come over a link, so a receive is posted from each
// peer when the link to it comes up (transport.LinkNotifier), or at once
// for the peers linked already (transport.Linker; every peer where the
// endpoint has no Linker): a rank of a big job with links made on demand
// keeps O(links) receives, not one per rank of the job. One goroutine
// waits on all of them and calls the listener's callback for each
// receive that completes, successfully or not; it ends with Close.
package notice

import (
	"reflect"
	"slices"
	"sync"

	"github.com/goccl/goccl/transport"
)

// Listener holds the posted receives of one endpoint on one tag.
type Listener struct {
	ep     transport.Endpoint
	links  transport.Endpoint
	tag    transport.Tag
	size   int // bytes of a notice
	heard  func(peer int)
	wg     sync.WaitGroup
	mu     sync.Mutex
	posted map[int]*Recv // by peer
	fresh  []int         // posted, not yet watched
	kick   chan struct{} // cap 1: fresh has news
	stop   chan struct{} // closed by Close
	once   sync.Once
}

// Recv is one posted receive of a notice.
type Recv struct {
	Req transport.Request
	Buf []byte
}

// New returns the listener of size-byte notices under tag on ep, which
// calls heard(peer) when a receive from peer completes, on its own
// goroutine, once per receive. links is the endpoint asked which peers are
// linked (transport.Linker, transport.LinkNotifier): ep itself, or the one
// ep wraps. Nothing is posted until Start: the owner stores the listener
// first, so that heard can find it.
func New(ep, links transport.Endpoint, tag transport.Tag, size int, heard func(peer int)) *Listener {
	return &Listener{ep: ep, links: links, tag: tag, size: size, heard: heard, posted: make(map[int]*Recv),
		kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

// Start posts a receive from every peer linked now, and from each peer
// whose link comes up later, and starts the goroutine that reports them.
func (l *Listener) Start() {
	ep := l.ep
	if ep.Size() == 1 {
		return
	}
	if ln, ok := l.links.(transport.LinkNotifier); ok {
		ln.OnLink(l.Post)
	}
	lk, _ := l.links.(transport.Linker)
	for q := range ep.Size() {
		if q != ep.Rank() && (lk == nil || lk.Linked(q)) {
			l.Post(q)
		}
	}
	l.wg.Go(l.watch)
}

// Post posts the receive from peer q unless it is posted (or q is this
// rank, or no peer).
func (l *Listener) Post(q int) {
	if q < 0 || q >= l.ep.Size() || q == l.ep.Rank() {
		return
	}
	l.mu.Lock()
	if l.posted[q] != nil {
		l.mu.Unlock()
		return
	}
	r := &Recv{Buf: make([]byte, l.size)}
	r.Req = l.ep.Irecv(q, l.tag, r.Buf)
	l.posted[q] = r
	l.fresh = append(l.fresh, q)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Get returns the receive posted from peer q, or nil: no link to q has
// come up, so no notice can come from it.
func (l *Listener) Get(q int) *Recv {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.posted[q]
}

// Stop tells the goroutine to end, without waiting for it (its owner
// may call Stop from the callback's aftermath); the receives end when
// the endpoint closes. It is safe to call more than once.
func (l *Listener) Stop() { l.once.Do(func() { close(l.stop) }) }

// Wait waits until the goroutine has ended, after Stop.
func (l *Listener) Wait() { l.wg.Wait() }

// watch waits on every posted receive and on news of more.
func (l *Listener) watch() {
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.stop)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.kick)},
	}
	var from []int // by case, from cases[2]
	for {
		i, _, _ := reflect.Select(cases)
		switch i {
		case 0:
			return
		case 1:
			l.mu.Lock()
			for _, q := range l.fresh {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(l.posted[q].Req.Done())})
				from = append(from, q)
			}
			l.fresh = l.fresh[:0]
			l.mu.Unlock()
		default:
			l.heard(from[i-2])
			cases = slices.Delete(cases, i, i+1)
			from = slices.Delete(from, i-2, i-1)
		}
	}
}

// Posted returns the peers a receive is posted from, in no order.
func (l *Listener) Posted() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	qs := make([]int, 0, len(l.posted))
	for q := range l.posted {
		qs = append(qs, q)
	}
	return qs
}
