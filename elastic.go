package goccl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/store"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// Recovering from a lost rank, two ways, both through Init's store:
//
// Shrink, as MPI ULFM's MPI_Comm_shrink: the surviving ranks form a new,
// smaller communicator and go on without the lost ones. Ranks keep their
// order; rank numbers close up.
//
// Readmit, as an elastic launcher restarting a worker: a replacement
// process starts with the lost rank's RANK and GOCCL_REJOIN=1 (or
// WithRejoin), and the survivors call Readmit; together they form the next
// generation of the world, full size, every survivor keeping its rank. A
// survivor's memory (ckpt's shards, say) then restores the newcomer.
//
// Each communicator belongs to a generation of the world (Init makes
// generation 0, each Readmit the next) and, within it, a shrink epoch.
// Ranks meet under store keys named after both, and the TCP handshake
// carries them in the job id, so a stale rank of an older communicator
// cannot connect to a newer one.
//
//	world g0 (6 ranks) --rank 2 and 4 die--> Shrink  -> g0.s1 (4 ranks: 0 1 3 5)
//	                                         Readmit -> g1   (6 ranks, 2 and 4 replaced)
//
// The store must outlive the failure: rank 0 hosts it (as torchrun's
// c10d rendezvous does), so rank 0 must survive, or the job uses a store
// of its own (`goccl store`).

// DefaultShrinkWait is how long Shrink waits for survivors to arrive when
// it does not know what became of every rank.
const DefaultShrinkWait = 2 * time.Second

// rendezvous is how a communicator's ranks met: the store and what it
// takes to connect a new generation or epoch.
type rendezvous struct {
	st      *storeRef
	jobID   string
	jobRank int // this process's rank in the job (the world of Init)
	jobSize int
	gen     int    // generation of the world
	shrink  int    // shrink epoch within the generation: 0 = the full world
	members []int  // job rank of each rank of the communicator; nil: all
	token   []byte // this process's alive key value

	secret  []byte
	streams int
	ifname  string
	tls     *tls.Config
	// handshake bounds a connection's authentication (0: the transport's
	// default, which reads GOCCL_HANDSHAKE_TIMEOUT).
	handshake time.Duration
	// lazy: TCP links come up on demand (WithConnect).
	lazy bool
	// spin is the transports' Spin (GOCCL_SPIN; 0: their defaults).
	spin time.Duration
	// book: where lazy links find their peers' addresses; set by connect
	// when it makes a lazy TCP endpoint (links.go).
	book *addrBook
}

// storeRef shares Init's store among the communicators of a lineage; the
// last one closed closes it.
type storeRef struct {
	st   store.Store
	refs atomic.Int32
}

func (s *storeRef) acquire() *storeRef { s.refs.Add(1); return s }

func (s *storeRef) release() error {
	if s.refs.Add(-1) == 0 {
		return s.st.Close()
	}
	return nil
}

// aliveKey is where job rank r says it is alive: an ephemeral key (the
// store deletes it when the process's connection ends).
func (r *rendezvous) aliveKey(jobRank int) string { return r.key("alive/" + strconv.Itoa(jobRank)) }

// key names a job-wide store key.
func (r *rendezvous) key(name string) string { return "goccl/" + r.jobID + "/" + name }

// epoch names the communicator's generation and shrink epoch.
func (r *rendezvous) epoch() string {
	if r.gen == 0 && r.shrink == 0 {
		return "" // Init's keys, as before generations existed
	}
	return fmt.Sprintf("g%d.s%d/", r.gen, r.shrink)
}

// connect connects this process as rank of size ranks in r's epoch.
func (r *rendezvous) connect(ctx context.Context, rank, size int) (transport.Endpoint, error) {
	job := r.jobID
	if e := r.epoch(); e != "" {
		job += "/" + strings.TrimSuffix(e, "/")
	}
	var kv tcp.KV = store.WithPrefix(r.st.st, r.key(r.epoch()))
	if r.lazy && max(r.streams, 1) == 1 {
		r.book = newAddrBook(kv, size)
		kv = r.book
	}
	return tcp.Connect(ctx, tcp.Config{
		Rank: rank, Size: size, JobID: job,
		KV:     kv,
		Secret: r.secret, Streams: r.streams, Interface: r.ifname, TLS: r.tls,
		HandshakeTimeout: r.handshake, WrapConn: testWrapConn, Lazy: r.lazy, Spin: r.spin,
	})
}

// next returns a copy of r for another epoch, holding the store.
func (r *rendezvous) next(gen, shrink int, members []int) *rendezvous {
	n := *r
	n.gen, n.shrink, n.members = gen, shrink, members
	n.st = r.st.acquire()
	return &n
}

// jobRanks returns the job rank of every rank of the communicator.
func (r *rendezvous) jobRanks() []int {
	if r.members != nil {
		return r.members
	}
	all := make([]int, r.jobSize)
	for i := range all {
		all[i] = i
	}
	return all
}

// JobRank returns this process's rank in the job it was launched into
// (Init's world), which Shrink does not change; Rank for a communicator
// that Init did not make.
func (c *Comm) JobRank() int {
	if r := c.shared.rdv; r != nil && c.id == 0 {
		return r.jobRank
	}
	return c.rank
}

// Shrink forms a new communicator of the ranks that survive a failure,
// like MPI ULFM's MPI_Comm_shrink. Every surviving rank of c calls it,
// usually after a collective failed and aborted c. Ranks keep their order
// and are numbered anew from 0 (JobRank keeps the original number).
//
// Survivors register in Init's store. Shrink decides once every rank of c
// has registered or is known lost: its process is dead (its alive key in
// the store went with its connection) or a failure blamed it. When it
// cannot tell, it decides after the wait (WithShrinkWait,
// DefaultShrinkWait);
// a rank that arrives later is left out and gets an error wrapping
// ErrAborted.
//
// Ranks may go on dying while Shrink runs. Each member of the agreed set
// then connects and says in the store whether it made it; if a member died
// before saying so, or failed, every member sees it and they all agree
// again, without the dead, in the next shrink epoch, until the set is
// stable or c's timeout ends. A member that dies after saying it made it
// is in the result, whose first collective then fails, as after any
// failure.
//
// c stays aborted; close it when done. Only world communicators made by
// Init (or by Shrink and Readmit) can shrink.
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	r, err := c.elastic("shrink")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	old := r.jobRanks()
	var lost []int // job ranks this rank knows to be lost
	c.shared.goneMu.Lock()
	for _, g := range append([]int{int(c.shared.lost.Load())}, c.shared.gone...) {
		if g >= 0 && g < len(old) && g != c.rank {
			lost = append(lost, old[g])
		}
	}
	c.shared.goneMu.Unlock()
	for epoch := r.shrink + 1; ; epoch++ {
		nr := r.next(r.gen, epoch, nil)
		n, members, err := c.shrinkRound(ctx, nr, old, lost)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, errShrinkAgain) || ctx.Err() != nil {
			return nil, &Error{Op: "shrink", Rank: c.rank, Peer: -1, Err: err}
		}
		old, lost = members, nil
	}
}

// errShrinkAgain says a round of Shrink failed because a member died or
// could not connect: every member sees the same and tries again.
var errShrinkAgain = errors.New("a member was lost during shrink")

// testShrinkHook, when set (export_test.go), is called at each stage of a
// round of Shrink: "registered", "agreed", "connected".
var testShrinkHook func(stage string)

// shrinkRound is one round of Shrink in nr's epoch, among the job ranks
// old, of which lost are known lost. It returns the new communicator; or
// errShrinkAgain and the round's members, when a member was lost before
// it said it had connected; or another error, which ends Shrink. nr's
// store is released unless the communicator returned holds it.
func (c *Comm) shrinkRound(ctx context.Context, nr *rendezvous, old, lost []int) (*Comm, []int, error) {
	r := c.shared.rdv
	st := nr.st.st
	at := func(name string) string { return nr.key(nr.epoch() + "shrink/" + name) }
	fail := func(err error) (*Comm, []int, error) {
		nr.st.release()
		return nil, nil, err
	}

	// Register, and say which ranks this one knows to be lost.
	slot, err := st.Add(ctx, at("joined"), 1)
	if err != nil {
		return fail(err)
	}
	if err := st.Set(ctx, at("slot/"+strconv.FormatInt(slot, 10)), []byte(strconv.Itoa(r.jobRank))); err != nil {
		return fail(err)
	}
	for _, jr := range lost {
		if err := st.Set(ctx, at("lost/"+strconv.Itoa(jr)), []byte{1}); err != nil {
			return fail(err)
		}
	}
	if testShrinkHook != nil {
		testShrinkHook("registered")
	}
	// Whether the store keeps alive keys (one with ephemeral keys does):
	// only then does a missing one mean a dead process.
	mine, err := peek(ctx, st, nr.aliveKey(r.jobRank))
	if err != nil {
		return fail(err)
	}
	tracksAlive := mine != nil
	dead := func(jr int) (bool, error) {
		a, err := peek(ctx, st, nr.aliveKey(jr))
		return a == nil, err
	}

	// Wait until everyone is accounted for, or the wait is over.
	wait := c.opts.shrinkWait
	if wait <= 0 {
		wait = DefaultShrinkWait
	}
	deadline := time.Now().Add(wait)
	in := map[int]bool{} // job ranks registered so far
	for {
		joined, err := st.Add(ctx, at("joined"), 0)
		if err != nil {
			return fail(err)
		}
		for i := int64(len(in)) + 1; i <= joined; i++ {
			jr, err := shrinkSlot(ctx, st, at("slot/"+strconv.FormatInt(i, 10)))
			if err != nil {
				return fail(err)
			}
			in[jr] = true
		}
		gone := 0
		for _, jr := range old {
			if in[jr] {
				continue
			}
			d, err1 := dead(jr)
			l, err2 := peek(ctx, st, at("lost/"+strconv.Itoa(jr)))
			if err := errors.Join(err1, err2); err != nil {
				return fail(err)
			}
			if d || l != nil {
				gone++ // its process is dead, or a failure blamed it
			}
		}
		if len(in)+gone >= len(old) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return fail(classify(ctx.Err()))
		case <-time.After(10 * time.Millisecond):
		}
	}

	// The first rank to get here proposes who is in: the registered ranks
	// still alive. Everyone takes the first proposal.
	joined, err := st.Add(ctx, at("joined"), 0)
	if err != nil {
		return fail(err)
	}
	var members []int
	for i := int64(1); i <= joined; i++ {
		jr, err := shrinkSlot(ctx, st, at("slot/"+strconv.FormatInt(i, 10)))
		if err != nil {
			return fail(err)
		}
		if d, err := dead(jr); err != nil {
			return fail(err)
		} else if d && tracksAlive {
			continue // registered, then died
		}
		members = append(members, jr)
	}
	slices.Sort(members)
	var b strings.Builder
	for i, jr := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(jr))
	}
	got, err := st.CompareSet(ctx, at("members"), nil, []byte(b.String()))
	if err != nil {
		return fail(err)
	}
	members = members[:0]
	for f := range strings.SplitSeq(string(got), ",") {
		jr, err := strconv.Atoi(f)
		if err != nil {
			return fail(fmt.Errorf("%w: bad shrink member list %q", ErrProtocol, got))
		}
		members = append(members, jr)
	}
	me := slices.Index(members, r.jobRank)
	if me < 0 {
		return fail(fmt.Errorf("%w: job rank %d arrived after the survivors %v had shrunk the communicator", ErrAborted, r.jobRank, members))
	}
	nr.members = members
	if testShrinkHook != nil {
		testShrinkHook("agreed")
	}

	// Connect. A member that dies or fails meanwhile would leave the others
	// waiting for it until the timeout: watch for that, and stop.
	word := func(jr int) string { return at("status/" + strconv.Itoa(jr)) }
	cctx, stop := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			again, _, err := shrinkStatus(cctx, st, members, word, tracksAlive, dead)
			if err != nil {
				return // cctx ended
			}
			if again != "" {
				stop(fmt.Errorf("%w: %s", errShrinkAgain, again))
				return
			}
			select {
			case <-cctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	var n *Comm
	ep, err := nr.connect(cctx, me, len(members))
	if err == nil {
		if n, err = newComm(ep, c.opts); err != nil {
			ep.Close()
			n = nil
		} else {
			n.shared.rdv = nr.next(nr.gen, nr.shrink, members) // n's own hold on the store
			if err = n.settle(cctx); err != nil {
				n = nil // settle closed it
			}
		}
	}
	if err == nil && testShrinkHook != nil {
		testShrinkHook("connected")
	}
	// Say how it went, then stop the watch.
	say := []byte("ok")
	if err != nil {
		say = []byte("failed: " + err.Error())
	}
	serr := st.Set(ctx, word(r.jobRank), say)
	stop(nil)
	wg.Wait()

	// Agree: the round stands if every member said ok, counting one that
	// died after saying so. A member's word is final once written, and a
	// dead member's silence is final, so every member decides the same.
	again := ""
	for serr == nil {
		var waiting bool
		if again, waiting, serr = shrinkStatus(ctx, st, members, word, tracksAlive, dead); serr != nil || again != "" || !waiting {
			break
		}
		select {
		case <-ctx.Done():
			serr = classify(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if serr == nil && again == "" {
		nr.st.release()
		return n, nil, nil
	}
	if n != nil {
		n.Abort(fmt.Errorf("%w: %s", errShrinkAgain, again))
		n.Close()
	}
	if serr != nil {
		return fail(serr)
	}
	var alive []int // the next round's ranks
	for _, jr := range members {
		if d, err := dead(jr); err != nil {
			return fail(err)
		} else if !d || !tracksAlive {
			alive = append(alive, jr)
		}
	}
	nr.st.release()
	return nil, alive, fmt.Errorf("%w: %s", errShrinkAgain, again)
}

// shrinkStatus reads what the members of a round of Shrink said of their
// connecting: again says why the round must be tried again (a member
// failed, or died without a word) and waiting whether some live member
// has not said yet.
func shrinkStatus(ctx context.Context, st store.Store, members []int, word func(int) string,
	tracksAlive bool, dead func(int) (bool, error)) (again string, waiting bool, err error) {
	for _, jr := range members {
		// Whether it is dead first, then its word: a member dead before
		// its word was read can no longer write one.
		d := false
		if tracksAlive {
			if d, err = dead(jr); err != nil {
				return "", false, err
			}
		}
		w, err := peek(ctx, st, word(jr))
		switch {
		case err != nil:
			return "", false, err
		case w == nil && d:
			return fmt.Sprintf("job rank %d died", jr), false, nil
		case w == nil:
			waiting = true
		case string(w) != "ok":
			return fmt.Sprintf("job rank %d %s", jr, w), false, nil
		}
	}
	return "", waiting, nil
}

// peek reads key without waiting for it: nil when it is not set.
func peek(ctx context.Context, st store.Store, key string) ([]byte, error) {
	absent := []byte{0} // CompareSet with it reads a key without waiting
	return st.CompareSet(ctx, key, absent, absent)
}

// Readmit forms the next generation of the world with replacement ranks:
// every survivor calls it (on the communicator that failed, or on one that
// Shrink made), and each lost rank is taken by a new process started with
// that rank's RANK and GOCCL_REJOIN=1 (WithRejoin). The result has the
// size of Init's world and every survivor keeps its JobRank as its rank,
// so state kept by rank (ckpt.Store) fits it. It returns once every rank
// has joined, or fails when the timeout ends first.
func (c *Comm) Readmit(ctx context.Context) (*Comm, error) {
	r, err := c.elastic("readmit")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	nr := r.next(r.gen+1, 0, nil)
	ep, err := nr.connect(ctx, r.jobRank, r.jobSize)
	if err != nil {
		nr.st.release()
		return nil, &Error{Op: "readmit", Rank: c.rank, Peer: -1, Err: err}
	}
	n, err := newComm(ep, c.opts)
	if err != nil {
		ep.Close()
		nr.st.release()
		return nil, &Error{Op: "readmit", Rank: c.rank, Peer: -1, Err: err}
	}
	n.shared.rdv = nr
	if err := n.settle(ctx); err != nil {
		return nil, &Error{Op: "readmit", Rank: c.rank, Peer: -1, Err: err}
	}
	return n, nil
}

// shrinkSlot reads the job rank registered under a Shrink slot key.
func shrinkSlot(ctx context.Context, st store.Store, key string) (int, error) {
	v, err := st.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	jr, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, fmt.Errorf("%w: bad shrink slot %q", ErrProtocol, v)
	}
	return jr, nil
}

// elastic returns c's rendezvous, or why c cannot shrink or readmit.
func (c *Comm) elastic(op string) (*rendezvous, error) {
	r := c.shared.rdv
	switch {
	case c.id != 0:
		return nil, invalid(op, c.rank, "only a world communicator can %s, not a group", op)
	case r == nil:
		return nil, invalid(op, c.rank, "needs the rendezvous store of Init (a communicator from New or NewLocal has none)")
	case c.closed.Load():
		return nil, invalid(op, c.rank, "communicator closed")
	}
	return r, nil
}
