package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// boardLimit is the largest allreduce that runs on the board (call_board.go).
const boardLimit = 1 << 10

// Small allreduces between goroutine ranks run on the board: every dtype,
// every op, counts up to the board's limit and one past it, world sizes
// that are not powers of two. Each rank's result is the sequential
// reference (rank order), its guard bands are intact, and the call went
// over no message; one element past the limit it goes over messages.
func TestBoardAllReduce(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		for _, dt := range reduceop.DTypes {
			limit := boardLimit / dt.Size()
			for _, op := range reduceop.Ops {
				if reduceop.Check(op, dt) != nil {
					continue
				}
				for _, count := range []int{0, 1, 3, limit - 1, limit, limit + 1} {
					t.Run(fmt.Sprintf("n=%d/%v/%v/%d", n, dt, op, count), func(t *testing.T) {
						want := reference(dt, op, n, span(0, count))
						onBoard := count <= limit
						runRanks(t, n, "", func(ctx context.Context, c *goccl.Comm) error {
							g := newGuarded(dt, count)
							for i := 0; i < count; i++ {
								g.set(i, val(op, c.Rank(), i))
							}
							before := c.Traffic().Total().SentMsgs
							if err := c.AllReduce(ctx, g.buf(), op); err != nil {
								return err
							}
							sent := c.Traffic().Total().SentMsgs - before
							if onBoard != (sent == 0) {
								return fmt.Errorf("rank %d: %d messages sent for %d elements (on the board: %v)", c.Rank(), sent, count, onBoard)
							}
							g.checkGuards(t, fmt.Sprintf("rank %d", c.Rank()))
							for i := 0; i < count; i++ {
								if got := g.get(i); got != want[i] {
									return fmt.Errorf("rank %d: element %d = %v, want %v", c.Rank(), i, got, want[i])
								}
							}
							return nil
						})
					})
				}
			}
		}
	}
}

// GOCCL_BOARD=0 keeps small calls on messages; the answer is the same.
func TestBoardOff(t *testing.T) {
	t.Setenv(goccl.EnvBoard, "0")
	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		buf := []float32{float32(c.Rank() + 1)}
		if err := c.AllReduce(ctx, buf, reduceop.Sum); err != nil {
			return err
		}
		if buf[0] != 6 {
			return fmt.Errorf("rank %d: %v, want 6", c.Rank(), buf[0])
		}
		if c.Traffic().Total().SentMsgs == 0 {
			return fmt.Errorf("rank %d: no message sent with the board off", c.Rank())
		}
		return nil
	})
}

// The comms log names the board as the call's algorithm, and barriers
// and groups use it too.
func TestBoardBarrierGroupLog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := goccl.RunLocal(ctx, 4, func(ctx context.Context, c *goccl.Comm) error {
		for range 50 {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
		}
		g, err := c.NewGroup([]int{1, 2, 3})
		if err != nil || g == nil {
			return err
		}
		buf := []int64{int64(c.Rank())}
		before := c.Traffic().Total().SentMsgs
		if err := g.AllReduce(ctx, buf, reduceop.Max); err != nil {
			return err
		}
		if buf[0] != 3 {
			return fmt.Errorf("rank %d: max %d, want 3", c.Rank(), buf[0])
		}
		if sent := c.Traffic().Total().SentMsgs - before; sent != 0 {
			return fmt.Errorf("rank %d: the group's allreduce sent %d messages", c.Rank(), sent)
		}
		barriers := 0
		for _, r := range c.CommsLog().Records() {
			if r.Op != commslog.Barrier {
				continue
			}
			barriers++
			if r.Algo != "board" {
				return fmt.Errorf("rank %d: barrier ran with %q", c.Rank(), r.Algo)
			}
		}
		if barriers < 50 {
			return fmt.Errorf("rank %d: the comms log holds %d barriers, want 50", c.Rank(), barriers)
		}
		return nil
	}, goccl.WithCommsLog(commslog.Config{Enabled: true}))
	if err != nil {
		t.Fatal(err)
	}
}

// Ranks whose calls differ fail at once with ErrMismatch naming the other
// rank, whether both calls run on the board (other count, other
// collective) or one of them goes over messages (a count past the
// board's limit): never the timeout, never a nil error.
func TestBoardMismatch(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, c *goccl.Comm) error
	}{
		{"count", func(ctx context.Context, c *goccl.Comm) error {
			return c.AllReduce(ctx, make([]float32, 2+c.Rank()), reduceop.Sum)
		}},
		{"off-board", func(ctx context.Context, c *goccl.Comm) error {
			return c.AllReduce(ctx, make([]float32, 2+c.Rank()*1000), reduceop.Sum)
		}},
		{"op", func(ctx context.Context, c *goccl.Comm) error {
			op := reduceop.Sum
			if c.Rank() == 1 {
				op = reduceop.Max
			}
			return c.AllReduce(ctx, make([]float32, 2), op)
		}},
		{"barrier", func(ctx context.Context, c *goccl.Comm) error {
			if c.Rank() == 1 {
				return c.Barrier(ctx)
			}
			return c.AllReduce(ctx, make([]float32, 2), reduceop.Sum)
		}},
		{"broadcast", func(ctx context.Context, c *goccl.Comm) error {
			if c.Rank() == 1 {
				return c.Broadcast(ctx, make([]float32, 2), 0)
			}
			return c.AllReduce(ctx, make([]float32, 2), reduceop.Sum)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := make([]error, 2)
			start := time.Now()
			goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
				// A matching call first, so that the slots are warm.
				if err := c.AllReduce(ctx, []float32{1}, reduceop.Sum); err != nil {
					return err
				}
				errs[c.Rank()] = tc.call(ctx, c)
				return nil
			}, goccl.WithTimeout(20*time.Second))
			for r, err := range errs {
				var ge *goccl.Error
				if !errors.Is(err, goccl.ErrMismatch) || !errors.As(err, &ge) || ge.Peer != 1-r {
					t.Errorf("rank %d: %v, want ErrMismatch naming rank %d", r, err, 1-r)
				}
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("took %v: the timeout, not the mismatch, ended it", d)
			}
		})
	}
}

// A rank that leaves without making the call is named by the ranks that
// wait for it on the board, with ErrMismatch (it made fewer calls).
func TestBoardPeerLeft(t *testing.T) {
	comms, err := goccl.NewLocal(3, goccl.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if err := c.AllReduce(ctx, []float32{1}, reduceop.Sum); err != nil {
				errs[r] = err
				return
			}
			if r == 2 {
				return // skips the second call
			}
			errs[r] = c.AllReduce(ctx, []float32{1}, reduceop.Sum)
		}()
	}
	wg.Wait()
	for r := 0; r < 2; r++ {
		var ge *goccl.Error
		if !errors.As(errs[r], &ge) || ge.Peer != 2 || !strings.Contains(errs[r].Error(), "closed its communicator after 1 calls") {
			t.Errorf("rank %d: %v, want an error naming rank 2, which closed after 1 call", r, errs[r])
		}
	}
	if errs[2] != nil {
		t.Errorf("rank 2: %v", errs[2])
	}
}

// Async board calls from one rank, many in flight, each with its own
// answer: a slot is reused only once every rank has read it.
func TestBoardAsyncInFlight(t *testing.T) {
	const calls = 40
	runRanks(t, 3, "", func(ctx context.Context, c *goccl.Comm) error {
		bufs := make([][]int32, calls)
		works := make([]*goccl.Work, calls)
		for i := range calls {
			bufs[i] = []int32{int32(i * (c.Rank() + 1)), 1}
			works[i] = c.AllReduceAsync(ctx, bufs[i], reduceop.Sum)
		}
		for i, w := range works {
			if err := w.Wait(ctx); err != nil {
				return err
			}
			if want := int32(i * 6); bufs[i][0] != want || bufs[i][1] != 3 {
				return fmt.Errorf("rank %d call %d: %v, want [%d 3]", c.Rank(), i, bufs[i], want)
			}
		}
		return nil
	})
}

// AlgorithmFor says which calls run on the board: small allreduces and
// barriers, not when an algorithm is forced or the board is off.
func TestBoardAlgorithmFor(t *testing.T) {
	check := func(want string, bytes int, opts ...goccl.Option) {
		t.Helper()
		comms, err := goccl.NewLocal(2, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			for _, c := range comms {
				c.Close()
			}
		}()
		if got := comms[0].AlgorithmFor(algo.AllReduce, bytes); string(got) != want {
			t.Errorf("allreduce of %d bytes: %q, want %q", bytes, got, want)
		}
	}
	check("board", 8)
	check("board", boardLimit)
	check(string(algo.Select(algo.AllReduce, boardLimit+1, 2)), boardLimit+1)
	check("ring", 8, goccl.WithAlgorithm(algo.Ring))
	t.Setenv(goccl.EnvBoard, "off")
	check(string(algo.Select(algo.AllReduce, 8, 2)), 8)
}

// Ranks whose GOCCL_BOARD differs fail at once with ErrMismatch naming
// each other, not at the timeout: a rank with the board off still
// announces its calls on the block.
func TestBoardSettingDiffers(t *testing.T) {
	comms := newComms(t, mem.New(2), func(r int, ep transport.Endpoint) (transport.Endpoint, goccl.Option) {
		setting := map[int]string{0: "1", 1: "0"}[r]
		return ep, goccl.WithGetenv(func(k string) string {
			if k == goccl.EnvBoard {
				return setting
			}
			return ""
		})
	})
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			errs[r] = c.AllReduce(context.Background(), []float32{1}, reduceop.Sum)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		var ge *goccl.Error
		if !errors.Is(err, goccl.ErrMismatch) || !errors.As(err, &ge) || ge.Peer != 1-r {
			t.Errorf("rank %d: %v, want ErrMismatch naming rank %d", r, err, 1-r)
		}
	}
	if !strings.Contains(errs[0].Error(), "GOCCL_BOARD") {
		t.Errorf("rank 0: %v, want the error to name GOCCL_BOARD", errs[0])
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v: the timeout, not the mismatch, ended it", d)
	}
}

// boardFails is a transport/mem endpoint whose Board fails on this rank
// for every group but the world, as a rank that runs out of memory or
// descriptors would while its peers map the board.
type boardFails struct {
	transport.Endpoint
	bd    transport.Boarder
	world bool // the world's board fails too
}

func (e boardFails) Board(id uint64, ranks []int, size int) (transport.Board, error) {
	if id != 0 || e.world {
		return nil, errors.New("out of memory (test)")
	}
	return e.bd.Board(id, ranks, size)
}

// A member that cannot get a group's board fails NewGroup and aborts the
// communicator, so that the members that have the board, whose small
// calls would wait on its slot until the timeout (20 s here), fail at
// once naming it. Where the failure is the world's board, New fails.
func TestBoardMemberWithout(t *testing.T) {
	comms := newComms(t, mem.New(3), func(r int, ep transport.Endpoint) (transport.Endpoint, goccl.Option) {
		if r == 1 {
			ep = boardFails{Endpoint: ep, bd: ep.(transport.Boarder)}
		}
		return ep, goccl.WithTimeout(20 * time.Second)
	})
	ctx := context.Background()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			defer c.Close()
			g, err := c.NewGroup([]int{0, 1, 2})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = g.AllReduce(ctx, []float32{1}, reduceop.Sum)
		})
	}
	wg.Wait()
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "out of memory (test)") {
		t.Errorf("rank 1: %v, want NewGroup's error saying why its board failed", errs[1])
	}
	for _, r := range []int{0, 2} {
		var ge *goccl.Error
		if !errors.Is(errs[r], goccl.ErrAborted) || errors.Is(errs[r], goccl.ErrTimeout) ||
			!errors.As(errs[r], &ge) || ge.Peer != 1 {
			t.Errorf("rank %d: %v, want an abort naming rank 1 (rank 1's own error says why)", r, errs[r])
		}
	}

	two := mem.New(2)
	defer two[0].Close()
	defer two[1].Close()
	_, err := goccl.New(boardFails{Endpoint: two[1], bd: two[1].(transport.Boarder), world: true})
	if err == nil || !strings.Contains(err.Error(), "out of memory (test)") {
		t.Errorf("New with no world board: %v, want its failure", err)
	}
}

// newComms makes a communicator with a 20 s timeout on each endpoint, or
// on what each returns for it, with the option it returns.
func newComms(t *testing.T, eps []transport.Endpoint, each func(r int, ep transport.Endpoint) (transport.Endpoint, goccl.Option)) []*goccl.Comm {
	t.Helper()
	comms := make([]*goccl.Comm, len(eps))
	for r, ep := range eps {
		ep, opt := each(r, ep)
		c, err := goccl.New(ep, goccl.WithTimeout(20*time.Second), opt)
		if err != nil {
			t.Fatal(err)
		}
		comms[r] = c
	}
	return comms
}

// A board call whose peer never comes times out, naming that peer, within
// the communicator's timeout: the call's context starts only when it
// waits (callCtx.prepare), and a wait still ends at the deadline.
func TestBoardStallTimesOut(t *testing.T) {
	const n, absent, timeout = 3, 1, 1500 * time.Millisecond
	comms, err := goccl.NewLocal(n, goccl.WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	if a := comms[0].AlgorithmFor(algo.AllReduce, 4); a != "board" {
		t.Fatalf("a 4-byte allreduce runs with %q, want the board", a)
	}
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		if r == absent {
			continue
		}
		wg.Go(func() {
			start := time.Now()
			errs[r] = c.AllReduce(context.Background(), []float32{1}, reduceop.Sum)
			took[r] = time.Since(start)
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout + 30*time.Second):
		t.Fatalf("the board call still waits %v after its timeout", 30*time.Second) // the deferred Close ends it
	}
	for r, err := range errs {
		if r == absent {
			continue
		}
		var ge *goccl.Error
		switch {
		case !errors.Is(err, goccl.ErrTimeout) || !errors.As(err, &ge):
			t.Errorf("rank %d: %v, want ErrTimeout", r, err)
		case ge.Peer != absent:
			t.Errorf("rank %d names peer %d, want the absent rank %d: %v", r, ge.Peer, absent, err)
		case took[r] < timeout:
			t.Errorf("rank %d gave up after %v, before the timeout", r, took[r])
		case took[r] > timeout+time.Second+3*time.Second: // the grace, and room for a loaded machine: no hang
			t.Errorf("rank %d took %v", r, took[r])
		}
	}
}

// With the fingerprint check off, ranks whose counts differ on the board
// still fail at once with ErrMismatch, naming the other rank and both
// lengths, as a receive of the wrong length does over messages.
func TestBoardLengthWithoutCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make([]error, 2)
	start := time.Now()
	goccl.RunLocal(ctx, 2, func(ctx context.Context, c *goccl.Comm) error {
		errs[c.Rank()] = c.AllReduce(ctx, make([]float32, 2+c.Rank()), reduceop.Sum)
		return nil
	}, goccl.WithTimeout(20*time.Second), goccl.WithMismatchCheck(false))
	for r, err := range errs {
		var ge *goccl.Error
		want := fmt.Sprintf("expecting %d bytes from peer %d, which sent %d bytes", 8+4*r, 1-r, 8+4*(1-r))
		if !errors.Is(err, goccl.ErrMismatch) || !errors.As(err, &ge) || ge.Peer != 1-r || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want ErrMismatch naming rank %d: %q", r, err, 1-r, want)
		}
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v: the timeout, not the mismatch, ended it", d)
	}
}
