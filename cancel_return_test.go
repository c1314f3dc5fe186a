package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/internal/testutil"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// A returned call holds nothing: a synchronous call cancelled at a random
// moment returns an *Error that wraps context.Canceled, and no byte lands
// in its buffer after it returned. The buffer is poisoned as soon as the
// call returns; the peer's send then goes on, the world is closed (after
// which no transport touches a buffer), and the poison must be whole.

// afterReturn is the poison byte a returned call's buffer is filled with.
const afterReturn = 0xA5

// cancelWorlds makes n ranks over each transport the cancellation tests
// run on, as goroutines of this process.
var cancelWorlds = map[string]func(t *testing.T, n int) []*goccl.Comm{
	"mem": func(t *testing.T, n int) []*goccl.Comm {
		comms, err := goccl.NewLocal(n, goccl.WithTimeout(20*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return comms
	},
	"tcp": func(t *testing.T, n int) []*goccl.Comm {
		return worldOver(t, n, func(ctx context.Context, job string, kv *testutil.KV, q int) (transport.Endpoint, error) {
			return tcp.Connect(ctx, tcp.Config{Rank: q, Size: n, JobID: job, KV: kv, ListenHost: "127.0.0.1",
				Logger: slog.New(slog.DiscardHandler)})
		})
	},
}

var cancelJobs int

// worldOver makes n communicators over endpoints that connect makes.
func worldOver(t *testing.T, n int, connect func(ctx context.Context, job string, kv *testutil.KV, q int) (transport.Endpoint, error)) []*goccl.Comm {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cancelJobs++
	job := fmt.Sprintf("cancel-%d-%d", time.Now().UnixNano(), cancelJobs)
	kv := testutil.NewKV()
	comms := make([]*goccl.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for q := range n {
		wg.Go(func() {
			ep, err := connect(ctx, job, kv, q)
			if err != nil {
				errs[q] = err
				return
			}
			if comms[q], errs[q] = goccl.New(ep, goccl.WithTimeout(20*time.Second)); errs[q] != nil {
				ep.Close()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(comms)
		t.Fatal(err)
	}
	return comms
}

func closeAll(comms []*goccl.Comm) {
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
}

// checkCancelled fails t unless err is nil (the call completed before the
// cancel) or an *Error of op that wraps context.Canceled.
func checkCancelled(t *testing.T, op string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var ge *goccl.Error
	if !errors.As(err, &ge) || ge.Op != op || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled %s returned %T %v, want a *goccl.Error of %s wrapping context.Canceled", op, err, err, op)
	}
}

// notStarted reports whether err is a call cancelled before it started,
// which posted nothing and left the communicator usable.
func notStarted(err error) bool {
	return errors.Is(err, context.Canceled) && !errors.Is(err, goccl.ErrAborted)
}

// checkPoison fails t if any byte of b is not the poison.
func checkPoison(t *testing.T, what string, b []byte) {
	t.Helper()
	for i, x := range b {
		if x != afterReturn {
			t.Fatalf("%s: byte %d is %#x after the call returned: written after return", what, i, x)
		}
	}
}

// cancelIters is how many random cancels each case makes.
func cancelIters() int {
	if testing.Short() {
		return 10
	}
	return 40
}

// randomDelay returns a wait of up to max for pause: a quarter of them
// are only a yield.
func randomDelay(rng *rand.Rand, max time.Duration) time.Duration {
	d := time.Duration(rng.Int64N(int64(max)))
	if d < max/4 {
		return 0
	}
	return d
}

// pause sleeps d, or yields for 0.
func pause(d time.Duration) {
	if d == 0 {
		runtime.Gosched()
		return
	}
	time.Sleep(d)
}

func TestCancelledRecvHoldsNothing(t *testing.T) {
	for name, world := range cancelWorlds {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			cancelled := 0
			defer func() { t.Logf("%d of %d calls cancelled, the others completed first", cancelled, cancelIters()) }()
			for i := range cancelIters() {
				n := []int{8, 4 << 10, 256 << 10}[i%3] // inline with its header, one message, pipelined
				comms := world(t, 2)
				buf := make([]byte, n)
				msg := make([]byte, n)
				for j := range msg {
					msg[j] = byte(j%251) + 1
				}
				ctx, cancel := context.WithCancel(context.Background())
				sent := make(chan error, 1)
				sendAfter, cancelAfter := randomDelay(rng, time.Millisecond), randomDelay(rng, time.Millisecond)
				go func() {
					pause(sendAfter)
					sent <- comms[1].Send(context.Background(), msg, 0, 7)
				}()
				go func() {
					pause(cancelAfter)
					cancel()
				}()
				err := comms[0].Recv(ctx, buf, 1, 7)
				for j := range buf {
					buf[j] = afterReturn
				}
				checkCancelled(t, "recv", err)
				if err != nil {
					cancelled++
				}
				if notStarted(err) {
					// Nothing was posted: receive the message elsewhere, so
					// that the sender is not left waiting for the timeout.
					if err := comms[0].Recv(context.Background(), make([]byte, n), 1, 7); err != nil {
						t.Fatalf("the receive after one that did not start: %v", err)
					}
				}
				<-sent
				closeAll(comms)
				checkPoison(t, fmt.Sprintf("iteration %d, %d bytes", i, n), buf)
				cancel()
			}
		})
	}
}

func TestCancelledCollectiveHoldsNothing(t *testing.T) {
	for name, world := range cancelWorlds {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, uint64(len(name))))
			cancelled := 0
			defer func() { t.Logf("%d of %d calls cancelled, the others completed first", cancelled, cancelIters()) }()
			for i := range cancelIters() {
				const n = 3
				count := []int{2, 3000, 100_000}[i%3] // the latency path, one message a step, pipelined
				comms := world(t, n)
				bufs := make([][]float32, n)
				for r := range bufs {
					bufs[r] = make([]float32, count)
					for j := range bufs[r] {
						bufs[r][j] = float32(r + 1)
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for r := 1; r < n; r++ {
					after := randomDelay(rng, time.Millisecond)
					wg.Go(func() {
						pause(after)
						comms[r].AllReduce(context.Background(), bufs[r], reduceop.Sum)
					})
				}
				cancelAfter := randomDelay(rng, time.Millisecond)
				go func() {
					pause(cancelAfter)
					cancel()
				}()
				err := comms[0].AllReduce(ctx, bufs[0], reduceop.Sum)
				mine := goccl.Bytes(bufs[0])
				for j := range mine {
					mine[j] = afterReturn
				}
				checkCancelled(t, "all_reduce", err)
				if err != nil {
					cancelled++
				}
				if notStarted(err) {
					// Nothing was sent: take part again, into another buffer,
					// so that the peers are not left waiting for the timeout.
					if err := comms[0].AllReduce(context.Background(), make([]float32, count), reduceop.Sum); err != nil {
						t.Fatalf("the call after one that did not start: %v", err)
					}
				}
				wg.Wait()
				closeAll(comms)
				checkPoison(t, fmt.Sprintf("iteration %d, %d floats", i, count), mine)
				cancel()
			}
		})
	}
}
