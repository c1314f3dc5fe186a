package devpath

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// The tests drive Peers over fakeLink, a Link on transport/mem endpoints
// with no communicator behind it, each rank with a hostsim device of its
// own.

const (
	dataTag transport.Tag = 1
	ctlTag  transport.Tag = 2
)

var errInjected = errors.New("injected failure")

// fakeLink is a Link over a transport/mem endpoint that records what goes
// through it.
type fakeLink struct {
	t        *testing.T
	ep       transport.Endpoint
	sameHost bool

	gate     chan struct{} // non-nil: data sends complete only once it is closed
	failSend int           // 1 + the index of the data send that fails; 0: none

	busy atomic.Int32 // Isend or Irecv running: Peers must call them one at a time

	mu      sync.Mutex
	sent    []int // lengths of the data messages sent, in order
	recvd   []int // lengths of the data receives posted, in order
	ctlSent int
	ctlRecv int
	logs    []string
}

func (l *fakeLink) Rank() int            { return l.ep.Rank() }
func (l *fakeLink) Size() int            { return l.ep.Size() }
func (l *fakeLink) SameHost(int) bool    { return l.sameHost }
func (l *fakeLink) JobRank(peer int) int { return 100 + peer }

func (l *fakeLink) enter() {
	if l.busy.Add(1) != 1 {
		l.t.Error("Link.Isend or Irecv called while another one runs")
	}
}

func (l *fakeLink) Isend(to int, b []byte) algo.Request {
	l.enter()
	defer l.busy.Add(-1)
	l.mu.Lock()
	l.sent = append(l.sent, len(b))
	k := len(l.sent)
	l.mu.Unlock()
	if k == l.failSend {
		return transport.Completed(errInjected)
	}
	r := l.ep.Isend(to, dataTag, b)
	if l.gate != nil {
		return gated{r, l.gate}
	}
	return r
}

func (l *fakeLink) Irecv(from int, b []byte) algo.Request {
	l.enter()
	defer l.busy.Add(-1)
	l.mu.Lock()
	l.recvd = append(l.recvd, len(b))
	l.mu.Unlock()
	return l.ep.Irecv(from, dataTag, b)
}

func (l *fakeLink) IsendCtl(to int, b []byte) algo.Request {
	l.mu.Lock()
	l.ctlSent++
	l.mu.Unlock()
	return l.ep.Isend(to, ctlTag, b)
}

func (l *fakeLink) IrecvCtl(from int, b []byte) algo.Request {
	l.mu.Lock()
	l.ctlRecv++
	l.mu.Unlock()
	return l.ep.Irecv(from, ctlTag, b)
}

func (l *fakeLink) Log(level slog.Level, msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logs = append(l.logs, fmt.Sprint(level, " ", msg, " ", args))
}

// logged reports whether a line logged contains s.
func (l *fakeLink) logged(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.logs {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func (l *fakeLink) sends() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.sent...)
}

func (l *fakeLink) recvs() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.recvd...)
}

// gated is a send that completes once its gate is open.
type gated struct {
	r    transport.Request
	gate chan struct{}
}

func (g gated) Wait(ctx context.Context) error {
	select {
	case <-g.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.r.Wait(ctx)
}

// rank is one rank of a test: its link, its device and its pools.
type rank struct {
	r     int
	link  *fakeLink
	hopts []hostsim.Option
	dev   *hostsim.Device
	ddev  device.Device // what the pools run on: dev, or a wrapper of it
	noIPC bool
	ds    Devices
	d     *Ctx
}

// newRanks makes n ranks over one transport/mem mesh; opt, if not nil,
// configures each before its device (hostsim.New(hopts...) unless opt
// made one) and its pools are made. Everything is closed at the
// end of the test.
func newRanks(t *testing.T, n int, opt func(*rank)) []*rank {
	t.Helper()
	eps := mem.New(n)
	rs := make([]*rank, n)
	for r := range rs {
		k := &rank{r: r, link: &fakeLink{t: t, ep: eps[r]}}
		if opt != nil {
			opt(k)
		}
		if k.dev == nil {
			k.dev = hostsim.New(k.hopts...)
		}
		if k.ddev == nil {
			k.ddev = k.dev
		}
		d, err := k.ds.Get(k.ddev, k.noIPC)
		if err != nil {
			t.Fatal(err)
		}
		k.d = d
		k.dev.StartTimeline()
		rs[r] = k
	}
	t.Cleanup(func() {
		for _, k := range rs {
			k.link.ep.Close()
			k.ds.Close()
			k.dev.Close()
		}
	})
	return rs
}

// run runs f on every rank at once and returns their errors.
func run(t *testing.T, rs []*rank, f func(ctx context.Context, k *rank) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, k := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(ctx, k)
		}()
	}
	wg.Wait()
	return errs
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// alloc returns n bytes of device memory on k's device, filled with
// pattern(i) if pattern is not nil.
func (k *rank) alloc(t *testing.T, n int, pattern func(i int) byte) *hostsim.Buffer {
	t.Helper()
	b, err := k.dev.Alloc(reduceop.Uint8, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	hb := b.(*hostsim.Buffer)
	if pattern != nil {
		for i := range hb.Bytes() {
			hb.Bytes()[i] = pattern(i)
		}
	}
	return hb
}

// runOn runs alg on b through k's pools, as goccl's onDevice does, and
// calls drain after a failure.
func (k *rank) runOn(ctx context.Context, b device.Buffer, n int, alg func(p *Peers, buf []byte) error) error {
	drain, err := k.d.Run(ctx, Call{Link: k.link, DType: b.DType(), Op: reduceop.Sum}, b, n, alg)
	if (drain != nil) != (err != nil) {
		return fmt.Errorf("Run returned drain %v with error %v", drain != nil, err)
	}
	if drain != nil {
		drain()
	}
	return err
}

// spans returns the bytes of each span of kind on d's timeline.
func spans(d *hostsim.Device, kind hostsim.Kind) []int {
	var n []int
	for _, s := range d.Timeline() {
		if s.Kind == kind {
			n = append(n, s.Bytes)
		}
	}
	return n
}

// chunks is how the data path cuts a message of n bytes.
func chunks(n int) []int {
	if n == 0 {
		return []int{0}
	}
	var c []int
	for lo := 0; lo < n; lo += Chunk {
		c = append(c, min(Chunk, n-lo))
	}
	return c
}

func pattern(seed int) func(int) byte {
	return func(i int) byte { return byte(i*7 + i/Chunk*13 + seed) }
}

// faultyDev is a hostsim device whose streams fail the failAt-th copy
// from host (counted over all its streams from 1).
type faultyDev struct {
	*hostsim.Device
	failAt int32
	n      atomic.Int32
}

func (f *faultyDev) NewStream() (device.Stream, error) {
	s, err := f.Device.NewStream()
	if err != nil {
		return nil, err
	}
	return faultyStream{s, f}, nil
}

type faultyStream struct {
	device.Stream
	f *faultyDev
}

func (s faultyStream) CopyFromHost(dst device.Buffer, off int, src []byte) error {
	if s.f.n.Add(1) == s.f.failAt {
		return errInjected
	}
	return s.Stream.CopyFromHost(dst, off, src)
}
