package goccl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/backend"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/internal/flight"
	"github.com/goccl/goccl/internal/notice"
	"github.com/goccl/goccl/internal/rendezvous"
	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/internal/slab"
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport"
)

// DefaultTimeout is how long a collective waits on its peers when neither
// the context, WithTimeout, GOCCL_TIMEOUT nor the configuration file says
// otherwise: 30 minutes, as in torch.distributed and DeepSpeed.
const DefaultTimeout = 30 * time.Minute

// Comm is a communicator: a group of ranks that run collectives together.
// Every rank of the group must call the same collectives in the same order
// with matching arguments, as with NCCL and torch.distributed.
//
// The methods of one Comm may be called from several goroutines, but the
// order in which collectives are started must be the same on every rank;
// the async forms fix that order when they are called, not when they run.
//
// After a failure (a peer lost, a timeout, a mismatch) the communicator is
// aborted: the shared endpoint is closed so that no buffer is touched after
// the call returns, and every later call returns ErrAborted at once. A
// buffer that a failed or cancelled collective was writing holds
// unspecified contents.
type Comm struct {
	shared *shared
	id     uint64 // group id, part of every tag
	rank   int    // rank in this group
	ranks  []int  // group rank -> endpoint (world) rank
	opts   options
	board  *board         // small collectives in shared memory (call_board.go), or nil
	be     *backend.Group // the backend calls are delegated to (backend.go), or nil

	track    callTrack     // the collectives started on this group, and which are finished (call_order.go)
	p2pMu    sync.Mutex    // posts a point-to-point header and payload together (p2p.go)
	children atomic.Uint64 // groups created from this one
	closed   atomic.Bool

	// perHost: this group's ranks a host, in blocks, for the algorithm
	// choice (init_topology.go); 0 or 1: one a host, as far as it knows.
	perHost int
	// segLog: log2 of the segment size the pipelined algorithms cut this
	// group's large host messages into, where its transport asks for one
	// (call_segment.go); 0: their default.
	segLog uint8
	// picks: the cost model's last answer for each collective
	// (call_dispatch.go); algosGen counts SetAlgorithm calls, which void them.
	picks    [algo.Barrier + 1]atomic.Pointer[cachedPick]
	algosGen atomic.Uint64
}

// shared is what the world communicator and every group made from it share.
type shared struct {
	ep        transport.Endpoint
	counts    *transport.CountingEndpoint // ep, counting messages and bytes
	lost      atomic.Int64                // world rank blamed for the abort, or -1
	blamed    atomic.Pointer[blamed]      // whom every failed call names (abort_verdict.go)
	groups    sync.Map                    // group id -> *Comm of this rank (call_order.go)
	strays    transport.StrayReporter     // ep's, or nil
	flight    *flight.Recorder            // the flight recorder (call_trace.go), or nil
	calls     sync.Mutex                  // every group's callTrack and the recorder's ring: one lock to order and record a call (call_order.go)
	notices   *notice.Listener            // posted abort-notice receives (abort_blame.go, internal/notice)
	aborted   atomic.Pointer[error]
	closeOne  sync.Once
	closed    chan struct{} // closed once an abort has closed the endpoint
	pending   atomic.Int32  // link losses being looked into
	goneMu    sync.Mutex
	gone      []int          // world ranks whose link broke with no goodbye
	left      map[int]uint64 // world rank -> world calls it made before it closed (abort_leave.go); goneMu
	doneOne   sync.Once
	log       *commslog.Logger
	rdv       *rendezvous.Rendezvous  // how Init met the other ranks, or nil (internal/rendezvous)
	perHost   int                     // world ranks a host, in aligned blocks, as Init agreed (init_topology.go); 0: not known
	devs      devices                 // per-device streams and pools of the device data path (device_path.go)
	boarder   transport.Boarder       // the endpoint's boards (call_board.go), or nil
	segments  transport.SegmentHinter // the endpoint's segment sizes (call_segment.go), or nil
	packed    atomic.Int64            // bytes copied into and out of packed buffers (pack, unpack)
	traceDir  string                  // GOCCL_TRACE_DIR: where the flight recorder dumps (call_trace.go)
	traceStop func()                  // ends the recorder's SIGUSR1 handler
	traceOnce sync.Once
}

type options struct {
	timeout time.Duration
	algo    algo.Algorithm   // WithAlgorithm's argument, until parsed into algos
	algos   []algo.Algorithm // the families allowed (GOCCL_ALGO); nil: the cost model's choice
	noCheck bool             // no fingerprints (WithMismatchCheck(false))
	backend string           // GOCCL_BACKEND (backend.go)
	logCfg  *commslog.Config
	getenv  func(string) string

	timeoutSet bool    // WithTimeout was given
	checkSet   bool    // WithMismatchCheck was given
	cfg        *Config // WithConfig, or GOCCL_CONFIG's file once resolved (init_config.go)
	debugOn    bool    // GOCCL_DEBUG (init_debug.go)
	debugLevel slog.Level
	debugOut   io.Writer // nil: stderr

	// Init's options.
	env       *Env
	transport string
	secret    []byte
	jobID     string
	streams   int
	connect   string // "lazy" or "eager" once resolved
	tls       *tls.Config
	rejoin    bool
	// Resolved by init_config.go from the environment or the file.
	secretFile    string
	tlsFiles      [3]string // cert, key, CA
	ifname        string
	storeBind     string
	handshake     time.Duration // GOCCL_HANDSHAKE_TIMEOUT or the file; 0: the defaults
	externalStore bool
	// spin is the spin of the transports Init makes (GOCCL_SPIN): 0 their
	// defaults, negative none; yield: their polls give the core away.
	spin  time.Duration
	yield bool

	shrinkWait time.Duration
}

// Option configures a communicator.
type Option func(*options)

// WithTimeout sets how long collectives wait on peers (GOCCL_TIMEOUT;
// default DefaultTimeout). A rank that times out then listens for up to
// timeout/10, clamped to [100ms, 1s], to name the rank at fault, so a
// call fails after at most timeout plus that grace.
func WithTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout, o.timeoutSet = d, true }
}

// WithAlgorithm forces an algorithm family for every collective it
// implements, like NCCL_ALGO; the others keep the cost model's choice. A
// comma-separated list ("ring,tree") lets the cost model choose among the
// listed families. The environment variable GOCCL_ALGO does the same.
func WithAlgorithm(a algo.Algorithm) Option { return func(o *options) { o.algo = a } }

// WithShrinkWait sets how long Shrink waits for survivors when it cannot
// tell what became of every rank (default DefaultShrinkWait).
func WithShrinkWait(d time.Duration) Option { return func(o *options) { o.shrinkWait = d } }

// WithCommsLog turns on the comms logger with cfg (GOCCL_COMMS_LOG=1 and its
// companions do the same from the environment).
func WithCommsLog(cfg commslog.Config) Option { return func(o *options) { o.logCfg = &cfg } }

// WithMismatchCheck turns the collective fingerprint on (the default) or
// off. With it, each collective's first message from one rank to another
// carries 32 bytes naming the call, and ranks that disagree get ErrMismatch
// instead of a hang or misread data; BENCHMARKS.md measures its cost. Every
// rank must use the same setting.
func WithMismatchCheck(on bool) Option {
	return func(o *options) { o.noCheck, o.checkSet = !on, true }
}

// WithGetenv replaces os.Getenv for reading GOCCL_* settings (tests).
func WithGetenv(getenv func(string) string) Option { return func(o *options) { o.getenv = getenv } }

func buildOptions(opts []Option) (options, error) {
	o := options{getenv: os.Getenv}
	for _, f := range opts {
		f(&o)
	}
	// Options > environment > file > defaults (init_config.go).
	err := resolve(&o)
	return o, err
}

// New returns the world communicator over an endpoint: one rank per
// endpoint rank. The communicator owns ep and closes it in Close.
func New(ep transport.Endpoint, opts ...Option) (*Comm, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newComm(ep, o)
}

func newComm(ep transport.Endpoint, o options) (*Comm, error) {
	ranks := make([]int, ep.Size())
	for i := range ranks {
		ranks[i] = i
	}
	cfg := commslog.ConfigFromEnv(o.getenv)
	if o.logCfg != nil {
		cfg = *o.logCfg
	}
	counting := transport.Counting(ep)
	sh := &shared{ep: counting, counts: counting, log: commslog.New(cfg, ep.Rank(), ep.Size())}
	sh.lost.Store(-1)
	sh.closed = make(chan struct{})
	sh.flight, sh.traceDir = newRecorder(o.getenv, &sh.calls), o.getenv("GOCCL_TRACE_DIR")
	sh.devs.noIPC = ipcDisabled(o.getenv(EnvDeviceIPC))
	c := &Comm{shared: sh, rank: ep.Rank(), ranks: ranks, opts: o}
	sh.boarder, _ = ep.(transport.Boarder)
	sh.segments, _ = ep.(transport.SegmentHinter)
	c.segLog = segmentLog(sh.segments, ranks, c.rank)
	err := c.openBackend() // a backend of host memory drops the boarder
	if err == nil {
		c.board, err = newBoard(c, sh.boarder)
	}
	if err != nil {
		return nil, fmt.Errorf("goccl: rank %d: %w", c.rank, err)
	}
	sh.groups.Store(uint64(0), c)
	c.watchSignal()
	if sr, ok := ep.(transport.StrayReporter); ok {
		sr.OnStray(sh.finished, sh.stray)
		sh.strays = sr
	}
	if n, ok := ep.(transport.PeerLossNotifier); ok {
		// A lost peer aborts the communicator at once, so that every call
		// waiting on anyone, not only on that peer, fails naming it.
		// Closing the endpoint waits for the transport's goroutines, the
		// caller among them: so it runs on its own; the abort itself is
		// recorded at once.
		n.OnPeerLoss(c.peerLost)
	}
	c.listen()
	return c, nil
}

// Rank returns this process's rank in the communicator.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in the communicator.
func (c *Comm) Size() int { return len(c.ranks) }

// Ranks returns the world ranks of the group's members, in group order.
func (c *Comm) Ranks() []int { return append([]int(nil), c.ranks...) }

// GlobalRank returns the world rank of group rank r.
func (c *Comm) GlobalRank(r int) (int, error) {
	if r < 0 || r >= len(c.ranks) {
		return 0, invalid("global_rank", c.rank, "rank %d not in group of size %d", r, len(c.ranks))
	}
	return c.ranks[r], nil
}

// Traffic returns the messages and bytes this rank has sent to and
// received from each world rank, over every group that shares this
// communicator's connections (the wire volume, payload bytes only).
func (c *Comm) Traffic() transport.Stats { return c.shared.counts.Stats() }

// CommsLog returns the comms logger (records, summary); nil-safe methods.
func (c *Comm) CommsLog() *commslog.Logger { return c.shared.log }

// Close releases the communicator. Closing the world communicator closes
// the endpoint, which aborts every group made from it; closing a group only
// marks that group closed.
func (c *Comm) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.board.close()
	if c.be != nil {
		defer c.be.Close() // after the endpoint: a backend may end the job
	}
	if c.id != 0 {
		return nil
	}
	if c.shared.aborted.Load() != nil || c.shared.pending.Load() > 0 {
		// An abort is telling the peers why before it closes the
		// endpoint: let it (notify and awaitNotice bound that).
		c.awaitClosed()
	}
	if c.shared.aborted.Load() == nil {
		c.sayLeaving()
	}
	c.shared.stopTrace()
	var err error
	c.shared.closeOne.Do(func() { err = c.shared.ep.Close() })
	c.shared.notices.Stop()
	c.shared.notices.Wait()
	c.shared.devs.close()
	if r := c.shared.rdv; r != nil {
		err = errors.Join(err, r.Release())
	}
	return err
}

// live reports whether c is neither closed nor aborted (usable's nil).
func (c *Comm) live() bool { return c.shared.aborted.Load() == nil && !c.closed.Load() }

// usable returns the error every call returns on a closed or aborted
// communicator.
func (c *Comm) usable(op string) error {
	if p := c.shared.aborted.Load(); p != nil {
		return &Error{Op: op, Rank: c.rank, Peer: c.blamedPeer(), Err: *p}
	}
	if c.closed.Load() {
		return &Error{Op: op, Rank: c.rank, Peer: -1, Err: fmt.Errorf("%w: communicator closed", ErrAborted)}
	}
	return nil
}

// Tags (wire's layout): the top 24 bits name the group, the next bit says
// point-to-point, the low 39 bits count collectives (or carry the user's
// p2p tag).
const (
	tagGroupShift = wire.GroupShift
	tagP2P        = wire.P2PBit
)

// nextTag orders a collective on c; c.shared.calls is held.
func (c *Comm) nextTag() transport.Tag {
	c.track.seq++
	return wire.CollectiveTag(c.id, c.track.seq)
}

// peers adapts a communicator to algo.Peers for one collective call.
type peers struct {
	peersHead
	peerMsgs
}

// reset makes p the zero peers again, clearing only the slab entries
// that were handed out.
func (p *peers) reset() {
	p.peersHead = peersHead{}
	p.reqs.Reset()
	p.fpReqs.Reset()
	p.fpBufs.Reset()
}

// peersHead is peers less its slabs.
type peersHead struct {
	c      *Comm
	op     string
	tag    transport.Tag
	elem   int
	reduce func(dst, src []byte) error

	waitOn      atomic.Int32 // 1 + the group rank a receive waits on (call_trace.go), 0: none
	fp          fingerprint  // this call's (call_fingerprint.go)
	check       bool         // send and check fingerprints
	sent, heard slab.RankSet // peers the first message went to / came from
	after       device.Event // on a framework's stream: the event the call's device work waits on (device_stream.go)
	drain       func()       // after a failure on device memory: wait for the call's device work (device_path.go)
}

// peerMsgs holds a call's requests, and the buffers of small first
// messages (msgBuf), handed out once each: an exchange of a few messages
// allocates none (they live in the call).
type peerMsgs struct {
	reqs   slab.Slab[request]
	fpReqs slab.Slab[fpRecv]
	fpBufs slab.Slab[[fpLen + fpSmall]byte]
}

var (
	_ algo.Peers     = (*peers)(nil)
	_ algo.Segmenter = (*peers)(nil)
)

func (p *peers) Rank() int     { return p.c.rank }
func (p *peers) Size() int     { return len(p.c.ranks) }
func (p *peers) ElemSize() int { return p.elem }

// Topology implements algo.Hosts for algo/twolevel: the machine the picks assume.
func (p *peers) Topology() algo.Topology { return p.c.topology() }

func (p *peers) Reduce(dst, src []byte) error {
	if p.reduce == nil {
		return fmt.Errorf("goccl: %s has no reduction", p.op)
	}
	return p.reduce(dst, src)
}

func (p *peers) Isend(to int, b []byte) algo.Request {
	if p.check && p.sent.Add(to) {
		return p.sendFirst(to, b)
	}
	r := p.reqs.Next()
	*r = request{p: p, peer: to, dir: "->", r: p.c.shared.ep.Isend(p.c.ranks[to], p.tag, b)}
	return r
}

func (p *peers) Irecv(from int, b []byte) algo.Request {
	if p.check && p.heard.Add(from) {
		return p.recvFirst(from, b)
	}
	r := p.reqs.Next()
	*r = request{p: p, peer: from, dir: "<-", r: p.c.shared.ep.Irecv(p.c.ranks[from], p.tag, b)}
	return r
}

type request struct {
	p       *peers
	peer    int
	dir     string
	r       transport.Request
	first   transport.Request // a separate fingerprint message, or nil
	scratch []byte            // pooled send buffer, freed once sent
}

func (r *request) Wait(ctx context.Context) error {
	if r.dir == "<-" {
		r.p.waitOn.Store(int32(r.peer + 1))
	}
	if r.first != nil {
		if err := r.first.Wait(ctx); err != nil {
			return r.wrap(err)
		}
	}
	if err := r.r.Wait(ctx); err != nil {
		return r.wrap(err)
	}
	r.release()
	if r.scratch != nil {
		scratch.Put(r.scratch)
		r.scratch = nil
	}
	return nil
}

// release hands the transport back its requests once they succeeded, so
// that it reuses them (transport.Release); a later Wait finds them done.
func (r *request) release() {
	if r.first != nil {
		transport.Release(r.first)
		r.first = nil
	}
	transport.Release(r.r)
	r.r = releasedReq
}

// releasedReq stands for a request that succeeded and was released.
var releasedReq = transport.Completed(nil)

func (r *request) wrap(err error) error {
	c := r.p.c
	if errors.Is(err, transport.ErrPeerClosed) || errors.Is(err, transport.ErrClosed) {
		if errors.Is(err, transport.ErrPeerClosed) {
			// A peer that closes under a collective has usually aborted
			// because of someone else; its notice comes ahead of its
			// goodbye and names that rank (abort_blame.go).
			c.awaitNotice(c.ranks[r.peer], time.Second)
		}
		if e := r.leftEarly(); e != nil {
			return e // the peer closed after its last call, before this one
		}
		if lost := c.blamedPeer(); lost >= 0 {
			return &Error{Op: r.p.op, Rank: c.rank, Peer: lost, Dir: r.dir, Err: c.abortCause(err)}
		}
		if p := c.shared.aborted.Load(); p != nil && errors.Is(err, transport.ErrClosed) {
			// Aborted under this call for another reason: say which.
			return &Error{Op: r.p.op, Rank: c.rank, Peer: r.peer, Dir: r.dir, Err: *p}
		}
	}
	if lm := (*transport.LengthMismatch)(nil); errors.As(err, &lm) {
		return r.lengthMismatch(lm.Got, lm.Want)
	}
	return &Error{Op: r.p.op, Rank: c.rank, Peer: r.peer, Dir: r.dir, Err: classify(err)}
}

// lengthMismatch is the error of a receive whose message had got bytes
// where this rank expected want: the ranks disagree on sizes (all-to-all
// splits, say), which the fingerprint cannot show when counts may differ
// by rank.
func (r *request) lengthMismatch(got, want int) error {
	return &Error{Op: r.p.op, Rank: r.p.c.rank, Peer: r.peer, Dir: r.dir,
		Err: fmt.Errorf("%w: %v, expecting %d bytes from peer %d, which sent %d bytes",
			ErrMismatch, r.p.describe(), want, r.peer, got)}
}

// abortCause is the error the communicator was aborted with, or err as
// such while the abort is still being recorded.
func (c *Comm) abortCause(err error) error {
	if p := c.shared.aborted.Load(); p != nil {
		return *p
	}
	return fmt.Errorf("%w: %w", ErrAborted, err)
}

// lostPeer returns the group rank whose lost link aborted the
// communicator, or -1.
func (c *Comm) lostPeer() int {
	if lost := int(c.shared.lost.Load()); lost >= 0 {
		return slices.Index(c.ranks, lost)
	}
	return -1
}

// reducer returns the element-wise reduction for dt and op on host bytes
// (Avg sums; the division happens once at the end).
func reducer(k reduceop.Kernel, dt reduceop.DType, op reduceop.Op) func(dst, src []byte) error {
	if op == reduceop.Avg {
		op = reduceop.Sum
	}
	if _, ok := k.(reduceop.Host); ok {
		if f := reduceop.HostFunc(dt, op); f != nil {
			return f // made once: a call on the latency path allocates none
		}
	}
	return func(dst, src []byte) error { return k.Reduce(dt, op, dst, src) }
}

// SetAlgorithm forces an algorithm family for the collectives started
// after it returns ("" goes back to the cost model). Every rank must call
// it at the same point in its sequence of calls, and not while a collective
// of c is running.
func (c *Comm) SetAlgorithm(a algo.Algorithm) error {
	if a != "" {
		var err error
		if a, err = algo.ParseAlgorithm(string(a)); err != nil {
			return invalid("set_algorithm", c.rank, "%v", err)
		}
	}
	c.opts.algos = nil
	if a != "" {
		c.opts.algos = []algo.Algorithm{a}
	}
	c.algosGen.Add(1)
	return nil
}
