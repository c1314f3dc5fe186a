package goccl

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/internal/clock"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/reduceop"
)

// call is one collective, checked and ordered (its tag taken) but not yet
// run. Splitting the two lets the async forms fix the order of collectives
// when they are called, while the bytes move later.
//
// A call is 1.1 KB, most of it the message slabs of its peers, which a
// call on the board never touches: the head and the slabs are apart, so
// that reset clears only what a call used (clearing the whole call cost
// 26 ns, a tenth of an 8-byte allreduce on the board).
type call struct {
	callHead
	own  peers        // what p points to: one allocation for both
	ownB backend.Call // what bc points to, where a backend runs the call
}

// callHead is a call less its peers: what every call uses, then what
// only the calls of one path use, each path's fields in a struct of its
// own (embedded, so that k.onBoard reads as before).
type callHead struct {
	c     *Comm
	op    string // commslog op name, also used in errors
	bytes int64  // message size as nccl-tests counts it
	dt    reduceop.DType
	algo  string
	run   func(ctx context.Context) error
	err   error         // an argument error found before the call was ordered
	bc    *backend.Call // the call's data movement, delegated to the backend (backend.go)
	agreed

	trace   flight.Ticket // its place in the flight recorder's ring (call_trace.go)
	started clock.Stamp   // when it started running on this rank, for the recorder; 0: not yet
	ctx     callCtx       // what it runs under (exec)

	// The latency-bound calls have no run, so that they need no closure,
	// and come from callPool (newPooledCall), where do puts them back
	// when they succeed (pooled); body runs them: a call on the board
	// (onBoard) or a host allreduce over messages (arFn).
	pooled bool
	onBoardCall
	hostAllReduceCall
	deviceCall

	p *peers // what the call runs on, once ordered (nil: no bytes move)
}

// agreed is what every rank must agree on, sent in the fingerprint (see
// call_fingerprint.go).
type agreed struct {
	count  int64 // -1 where ranks legitimately differ
	redop  reduceop.Op
	root   int
	layout uint8 // a coalesced call's buffer lengths, hashed (coalesced.go); 0: one buffer
	// silent: every rank agrees the call has no elements, so it sends no
	// message and so no fingerprint of its own; exec gives it the ring
	// of fingerprints that rooted calls have (rootChecked).
	silent bool
}

// onBoardCall is a call that runs on the group's board (call_board.go): an
// allreduce of boardBuf with boardOp, or a barrier.
type onBoardCall struct {
	onBoard  bool
	prev     uint64 // this rank's previous board call in the same slot row, set by take
	boardBuf []byte
	boardOp  reduceop.Op
	mine     [boardLine]byte // a board allreduce's own contribution (internal/board's AllReduce)
}

// hostAllReduceCall is an allreduce of arView's host memory over
// messages, with arFn (hostAllReduce), when arFn is set.
type hostAllReduceCall struct {
	arFn   algo.AllReduceFunc
	arView view
}

// deviceCall is a call on device memory (device_path.go).
type deviceCall struct {
	// dev: the device of the call's buffers on the device data path,
	// else nil.
	dev device.Device
	// after, if set, runs once the call has ended, however it ended
	// (StreamComm's hold).
	after func()
	// chunk: the call moves device memory in messages of at most this
	// many bytes; 0 for host memory, sent whole.
	chunk int
}

// reset makes k the zero call again, clearing only what it used.
func (k *call) reset() {
	k.callHead = callHead{}
	k.own.reset()
}

// failed is a call whose exec returns err: an argument error found before
// anything was ordered.
func failed(err error) *call {
	k := new(call)
	k.err = err
	return k
}

// checked turns a constructor's (call, error) result into one call whose
// exec returns the error.
func checked(k *call, err error) *call {
	if err != nil {
		return failed(err)
	}
	return k
}

// exec runs a call under the communicator's timeout, logs it, and aborts
// the communicator if it fails while peers may still be exchanging bytes.
func (k *call) exec(ctx context.Context) error {
	if k.err != nil {
		return k.err
	}
	c := k.c
	rec := c.shared.flight
	caller := ctx
	// The clock is read once, before the call is ordered, so that the
	// flight recorder takes a call made in place as issued and started
	// in one step. A call on the board made in place reads none here: it
	// stamps its start once its slot is published (internal/board), and its
	// context starts only if something waits on it (callCtx.prepare).
	// The recorder takes it as started at a time not yet known, and
	// learns the time when the call waits or ends.
	live := c.live()
	if live {
		if k.onBoard && k.p.tag == 0 {
			k.ctx.prepare(caller, c.opts.timeout)
		} else {
			k.ctx.init(caller, c.opts.timeout)
			k.started = clock.Now()
		}
	}
	if k.p != nil && k.p.tag == 0 {
		if err := ctx.Err(); err != nil {
			return k.notStarted(err)
		}
		// Ordered even on an aborted communicator, so that this rank's
		// call of the slot is known when the verdict names a rank (usable
		// asks it).
		k.take(false, live)
	} else if live {
		rec.Start(k.trace, k.started) // an async call, ordered when it was made
	}
	if err := c.usable(k.op); err != nil {
		return err
	}
	ctx = &k.ctx
	defer k.ctx.release()
	log := c.shared.log
	// goccl's own calls (Init's barrier, the straggler report, the inner
	// calls of object collectives and Split) are not the user's.
	profiling := log.Profiling(k.op) && !commslog.IsInternal(ctx)
	var start time.Time
	if profiling {
		start = time.Now()
	}
	var err error
	if !k.onBoard && (k.root >= 0 || k.silent) && k.p != nil && k.p.check && c.Size() > 1 {
		err = k.p.rootChecked(ctx, k.body)
	} else {
		err = k.body(ctx)
	}
	if err != nil && errors.Is(caller.Err(), context.Canceled) {
		// The caller cancelled while this call's messages may be in
		// flight: the peers cannot finish it, so the communicator is
		// aborted, and they are told this rank cancelled (abort_cancel.go).
		err = k.cancelled(caller.Err(), err)
	}
	if err != nil {
		err = lift(err)
		var ge *Error
		if !errors.As(err, &ge) {
			err = &Error{Op: k.op, Rank: c.rank, Peer: -1, Err: classify(err)}
		} else if errors.Is(err, ErrTimeout) {
			// Find who the ranks stuck in this call are all waiting on.
			err = c.blameStall(ge)
		}
		k.stamp() // a board call that failed before it published: started now
		rec.End(k.trace, k.started, err)
		if !errors.Is(err, ErrInvalid) {
			c.abort(err)
			// The call's receives may still be posted into the caller's
			// buffers (a wait cut short by its context): they end only
			// when the endpoint closes, which an abort adopted from a
			// peer does on another goroutine. Return after it, so that
			// no byte lands in a buffer the caller has back.
			c.awaitClosed()
			if k.p != nil && k.p.drain != nil {
				k.p.drain() // nor from a device copy still queued
			}
			err = c.settled(k.op, err)
		}
		if k.p != nil {
			k.finish()
		}
		return err
	}
	k.succeeded()
	if profiling {
		log.Append(commslog.Record{
			Op: k.op, Bytes: k.bytes, DType: k.dt.String(), Algo: k.algo,
			Rank: c.rank, WorldSize: c.Size(), Start: start, Latency: time.Since(start),
		})
	}
	return nil
}

// waits starts k's context, and tells the flight recorder when k
// started if it has not been told, before k first waits: a board call
// made in place is recorded before its start is known (exec), and a dump
// of a call that stalls must say since when.
func (k *call) waits() {
	k.stamp()
	k.ctx.begin()
	k.c.shared.flight.Start(k.trace, k.started)
}

// stamp notes that k has started, now, unless it knew already.
func (k *call) stamp() {
	if k.started == 0 {
		k.started = clock.Now()
	}
}

// body runs the call's collective (exec has set up the rest).
func (k *call) body(ctx context.Context) error {
	switch {
	case k.bc != nil:
		return k.c.runBackend(ctx, k)
	case k.onBoard:
		return k.c.board.run(ctx, k)
	case k.arFn != nil:
		return k.c.hostAllReduce(ctx, k)
	}
	return k.run(ctx)
}

// do is exec for a call made for one synchronous use: a pooled call
// (newPooledCall) goes back to the pool once it has succeeded. One that
// failed is left to the garbage collector, since the flight recorder
// keeps what it waited on.
func (k *call) do(ctx context.Context) error {
	err := k.exec(ctx)
	if err == nil && k.pooled {
		k.reset()
		callPool.Put(k)
	}
	return err
}

// callPool holds the calls of the latency-bound collectives (allreduce,
// and barriers on the board), the ones whose allocation shows in their
// time.
var callPool = sync.Pool{New: func() any { return new(call) }}

// newPooledCall is newCall from callPool. The calls there are zero (do
// resets them), so it sets fields one by one: a whole-struct assignment
// would clear them again.
func (c *Comm) newPooledCall(op string, dt reduceop.DType, bytes int, a algo.Algorithm) *call {
	k := callPool.Get().(*call)
	k.c, k.op, k.dt, k.bytes, k.algo, k.root, k.pooled = c, op, dt, int64(bytes), string(a), -1, true
	return k
}

// finish marks a call that failed finished on this rank and sweeps the
// messages left under the calls that are now retired (call_order.go).
func (k *call) finish() {
	c := k.c
	c.shared.calls.Lock()
	from, to := c.finishLocked(uint64(k.p.tag) & (tagP2P - 1))
	c.shared.calls.Unlock()
	k.retire(from, to)
}

// succeeded records that k completed and finishes it, in one critical
// section. A call without peers was neither ordered nor recorded.
func (k *call) succeeded() {
	if k.p == nil {
		return
	}
	c := k.c
	sh := c.shared
	seq := uint64(k.p.tag) & (tagP2P - 1)
	sh.calls.Lock()
	sh.flight.EndLocked(k.trace, k.started, nil, 0, "")
	from, to := c.finishLocked(seq)
	sh.calls.Unlock()
	if k.onBoard && from == seq-1 && to == seq {
		// Every member posted this call on the board, so none sent a
		// message under its tag: there is nothing to sweep, and the
		// sweep (a look at every peer's queue, through the transports)
		// is a twentieth of the call.
		return
	}
	k.retire(from, to)
}

// retire sweeps the messages left under the calls (from, to] that k's
// end retired (call_order.go).
func (k *call) retire(from, to uint64) {
	if c := k.c; to > from && c.shared.aborted.Load() == nil {
		c.retire(from, to)
	}
}

// lift brings the *Error that an algorithm's wrapping hides to the front,
// so that every failure reads as goccl's errors do ("goccl: all_reduce
// rank 0 <- peer 2: ..."), with the algorithm's words ("ring allreduce:
// reduce-scatter: step 1: ...") after it, and errors.Is still finds the
// cause.
func lift(err error) error {
	var ge *Error
	if !errors.As(err, &ge) || err == error(ge) {
		return err
	}
	where, ok := strings.CutSuffix(err.Error(), ": "+ge.Error())
	if !ok {
		return err
	}
	e := *ge
	e.Err = fmt.Errorf("%s: %w", where, ge.Err)
	return &e
}

// Work is a collective started by an Async method (DeepSpeed's
// async_op=True). Wait for it before touching its buffers.
type Work struct {
	done chan struct{}
	err  error
}

// Wait blocks until the collective completes or ctx ends, and returns
// the collective's error once it has completed.
//
// ctx bounds the wait, not the call: if ctx ends first, Wait returns
// ctx's error as it is and the collective goes on, its buffers still in
// use until Done is closed (unlike the synchronous methods, which return
// only once goccl is done with their buffers). To stop an async call,
// cancel the context given to the Async method, or Abort the
// communicator: the call then withdraws by aborting the communicator, and
// Wait with a context that does not end returns its *Error once no byte
// of its buffers is read or written any more.
func (w *Work) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the collective has completed.
func (w *Work) Done() <-chan struct{} { return w.done }

// IsCompleted reports whether the collective has completed.
func (w *Work) IsCompleted() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// start runs k in its own goroutine. An argument error completes the Work
// at once.
func start(ctx context.Context, k *call) *Work {
	w := &Work{done: make(chan struct{})}
	if k.err == nil && k.p != nil && ctx.Err() != nil {
		k.err = k.notStarted(ctx.Err())
	}
	if k.err != nil {
		w.err = k.err
		if k.after != nil {
			k.after()
		}
		close(w.done)
		return w
	}
	k.take(true, false) // the order is the order of the Async calls
	go func() {
		w.err = k.exec(ctx)
		if k.after != nil {
			k.after()
		}
		close(w.done)
	}()
	return w
}
