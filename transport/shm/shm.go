//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/internal/scratch"
	"github.com/goccl/goccl/transport"
)

// Defaults for the zero fields of Config.
const (
	DefaultDir      = "/dev/shm"
	DefaultSlotSize = 8 << 10
	// DefaultSlots is the number of slots of a ring when Config.Slots is
	// zero, in a job of up to SmallJob ranks: rings of 1 MiB, which hold
	// a 512 KiB message and a few small ones, so that Isend copies it in
	// at once (a 2-rank allreduce of 1 MiB sends its halves so; with 64
	// slots it ran at 10.2 GB/s, with 128 at 15.3). A larger job's
	// n(n-1) rings get DefaultSlots/2 each, as before.
	DefaultSlots = 128
	// SmallJob is the most ranks a job may have for its rings to get
	// DefaultSlots slots: 8 ranks' 56 rings take 56 MiB, and a container's
	// /dev/shm is often 64 MiB.
	SmallJob          = 8
	DefaultSpin       = 30 * time.Microsecond
	DefaultMaxMessage = 1 << 32
	// DefaultCMAThreshold is the smallest message the receiver pulls
	// straight from the sender's memory when Config.CMAThreshold is zero.
	// Below it the pipelined copy through the ring is as fast or faster
	// (measured: 64 KiB at 14.8 GB/s by copy, 7.2 by CMA; 256 KiB at 7.4
	// and 8.3; 8 MiB at 7.4 and 16.2).
	DefaultCMAThreshold = 256 << 10
)

// Config describes one rank of a job whose ranks share a host.
type Config struct {
	Rank, Size int
	// JobID and Nonce name the job's segments; every rank must use the
	// same values, and a restart of the job should use a new Nonce. They
	// may not contain '/'.
	JobID, Nonce string
	// Dir is where the segments are created (DefaultDir): a tmpfs.
	Dir string
	// SlotSize is the size of a ring slot in bytes, header included
	// (DefaultSlotSize; at least 64, rounded up to a multiple of 64), and
	// Slots the number of slots of each ring (DefaultSlots in a job of
	// up to SmallJob ranks, half as many above). Each ordered pair of
	// ranks has one ring of 4 KiB + Slots*SlotSize bytes (RingBytes).
	SlotSize, Slots int
	// Spin is how long a waiting goroutine polls the ring before it parks
	// on a futex, and how long a wait on a receive polls for its
	// completion before it parks (DefaultSpin); a negative value never
	// spins.
	Spin time.Duration
	// Yield makes those polls give the core to any runnable thread between
	// them (sched_yield), as on a host with more ranks than cores
	// (transport.NewYieldSpinner).
	Yield bool
	// Help makes a caller that waits on a receive take the peer's
	// messages whose slots are all published off the ring itself while
	// the peer's drainer stands back (see helping in shm.go): no hand-off
	// between goroutines a message, and one thread a rank polls instead
	// of two. For a rank whose every peer is on shared memory (2 bound
	// ranks: 8 B over messages 2x, 16 KiB 1.2x faster; 4 ranks on 2
	// cores: 4 KiB 4.5x, 64 KiB 2x); beside other transports' links
	// where ranks outnumber cores, with StandBack, for a rank of one P
	// (with two it was slower: DECISIONS.md).
	Help bool
	// StandBack, with Help, keeps the drainer from polling at all: it
	// sleeps until a helper finds a message it leaves to the drainer (one
	// in the making, a descriptor to pull), or for helpIdle (longer while
	// no caller waits on the peer), and helpers
	// take whole messages of any length. For a rank of one P whose ranks
	// outnumber cores beside other transports' links: there a drainer
	// polls whenever no caller waits on its peer, which, with several
	// peers on the host, is most of the time, and every drainer that
	// polls is one more thread taking turns on the cores (2 emulated
	// hosts of 4 ranks on 2 cores, 8 B: 253-635 us to 107-190; 64 KiB
	// 2.0-2.3 ms to 0.47-0.50).
	StandBack bool
	// MaxMessage is the largest message accepted from a peer
	// (DefaultMaxMessage); a slot announcing more is a protocol error.
	MaxMessage int64
	// CMAThreshold is the smallest message sent with a single copy: the
	// sender publishes its buffer's address and the receiver copies it
	// with process_vm_readv (Linux cross-memory attach), straight into
	// the posted receive (DefaultCMAThreshold; negative: never). A
	// message that fits in the ring's free slots when it is sent is
	// copied in whatever its size. Where the kernel refuses (ptrace
	// rules, containers) the message and the later ones to that peer go
	// through the ring; Stats tells which path ran.
	CMAThreshold int

	readv func(pid int, local []unix.Iovec, remote []unix.RemoteIovec, flags uint) (int, error) // tests fake refusals
}

func (c *Config) fill() error {
	if c.Size < 1 || c.Rank < 0 || c.Rank >= c.Size {
		return fmt.Errorf("shm: rank %d of a job of size %d", c.Rank, c.Size)
	}
	if strings.ContainsRune(c.JobID, '/') || strings.ContainsRune(c.Nonce, '/') {
		return errors.New("shm: JobID and Nonce may not contain '/'")
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.SlotSize == 0 {
		c.SlotSize = DefaultSlotSize
	}
	c.SlotSize = max(64, (c.SlotSize+63)&^63)
	if c.SlotSize > 1<<30 {
		return errors.New("shm: SlotSize too large")
	}
	if c.Slots <= 0 {
		c.Slots = defaultSlots(c.Size)
	}
	if c.Slots > 1<<20 {
		return errors.New("shm: too many Slots")
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.MaxMessage <= 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.CMAThreshold == 0 {
		c.CMAThreshold = DefaultCMAThreshold
	}
	if c.readv == nil {
		c.readv = unix.ProcessVMReadv
	}
	return nil
}

func defaultSlots(size int) int {
	if size > SmallJob {
		return DefaultSlots / 2
	}
	return DefaultSlots
}

// RingBytes is the size of one ring's segment, header included, in a job
// of size ranks whose Config leaves SlotSize and Slots zero. The job's
// rings on a host take size*(size-1) times as much of Dir.
func RingBytes(size int) int {
	return hdrSize + defaultSlots(size)*DefaultSlotSize
}

// SegmentName is the file name of the segment that carries messages from
// rank from to rank to.
func SegmentName(job, nonce string, from, to int) string {
	return fmt.Sprintf("goccl-%s-%s-%d-%d", job, nonce, from, to)
}

// Endpoint is a transport.Endpoint over shared memory.
type Endpoint struct {
	cfg     Config
	m       *transport.Matcher
	peers   []*peer // nil at our own rank
	closing atomic.Bool
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	onLoss  atomic.Pointer[func(*transport.PeerError)]
	wakeR   int // the monitor's wake-up pipe
	wakeW   int
	maxMsg  uint64
	spin    *transport.Spinner // nil: no spinning
	boards  boards             // board.go

	// Counted by senders and drainers on every message: off the lines
	// the drainers poll (closing).
	_                                        cpu.CacheLinePad
	cmaSent, cmaPulled, cmaRefused, copySent atomic.Uint64
	_                                        cpu.CacheLinePad
}

// Stats counts how this endpoint's messages went.
type Stats struct {
	// CopySends: messages this rank copied into a ring (all messages
	// below CMAThreshold, larger ones that fitted in the ring's free
	// slots, and those where CMA is off or refused).
	CopySends uint64
	// CMASends: messages a peer pulled from this rank's memory with
	// process_vm_readv (one copy).
	CMASends uint64
	// CMARecvs: messages this rank pulled from a peer's memory.
	CMARecvs uint64
	// CMARefused: peers for which this rank's kernel refused
	// process_vm_readv, so that their large messages come by copy.
	CMARefused uint64
}

// Stats reports which paths this endpoint's messages took: a message of
// CMAThreshold bytes or more went by "cma" (single copy) when CMASends
// (at the sender) or CMARecvs (at the receiver) counted it, else by
// "copy" through the ring (it fitted in the free slots, or CMA was off
// or refused).
func (e *Endpoint) Stats() Stats {
	return Stats{CopySends: e.copySent.Load(), CMASends: e.cmaSent.Load(), CMARecvs: e.cmaPulled.Load(), CMARefused: e.cmaRefused.Load()}
}

// LargePath says how the next message of CMAThreshold bytes or more to
// peer will go when it does not fit in the ring's free slots, or is one
// of a stream under its tag (Isend): "cma", or "copy" when CMA is off or
// that peer's kernel refused it.
func (e *Endpoint) LargePath(peer int) string {
	if peer < 0 || peer >= e.cfg.Size || peer == e.cfg.Rank || e.cfg.CMAThreshold < 0 || e.peers[peer].cmaOff.Load() {
		return "copy"
	}
	return "cma"
}

var (
	_ transport.Endpoint         = (*Endpoint)(nil)
	_ transport.StrayReporter    = (*Endpoint)(nil)
	_ transport.PeerLossNotifier = (*Endpoint)(nil)
)

type peer struct {
	// Set at connect, then read by every goroutine; the flags are
	// written once. Padding keeps each group below on cache lines of its
	// own: a sender's writes to its fields must not evict the line the
	// drainer polls (dead), nor the drainer's writes the senders' lines.
	e     *Endpoint
	rank  int
	out   *ring // we write, the peer reads
	in    *ring // the peer writes, we read
	pidfd int   // -1 if pidfd_open failed: then the monitor polls kill(pid, 0)
	pid   int
	name  string      // of the segment we write, unlinked by its reader
	dead  atomic.Bool // the peer's process is gone
	left  atomic.Bool // the peer closed on purpose
	lost  atomic.Bool // the link failed: reported once
	// cmaOff: the peer's kernel refused to pull our messages.
	cmaOff atomic.Bool

	_ cpu.CacheLinePad

	// Drainer only: cross-memory attach.
	cmaChecked bool               // a pull from this peer worked once
	liov       []unix.Iovec       // the local side of a process_vm_readv
	riov       []unix.RemoteIovec // a descriptor's buffers in the peer
	rwin       []unix.RemoteIovec // the part of riov one process_vm_readv reads
	lone       [1][]byte          // the one local buffer of a plain receive
	probe      [1]byte

	_ cpu.CacheLinePad

	// Config.Help: a caller that waits on a receive from the peer takes
	// messages off the ring itself (helpStep), and the drainer holds
	// drainMu, as the helper does, while it takes a message; helpers
	// counts the callers helping, and the drainer sleeps on bgWake while
	// they do (awaitHelped).
	drainMu sync.Mutex
	helpers atomic.Int32
	// unhelped: the last helper stopped polling before its message came
	// (it waits parked); a drainer that stands back (Config.StandBack)
	// then looks every helpIdle, until a caller helps again.
	unhelped atomic.Bool
	bgWake   chan struct{} // capacity 1: wakes the drainer asleep while callers help
	bgTimer  *time.Timer   // the drainer's, for that sleep
	bgIdle   time.Duration // its next sleep while standing back unhelped (helpIdle to helpIdleMax)
	helped   atomic.Uint64 // messages a helper took (tests)

	_ cpu.CacheLinePad

	// Senders (Isend and the sender goroutine), under mu.
	mu      sync.Mutex
	queue   []sendItem
	qhead   int
	busy    bool  // the sender goroutine is writing a message
	sendErr error // sends fail with it
	wake    chan struct{}
	// The messages of CMAThreshold bytes or more sent under streamTag,
	// the last tag such a message had (Isend's stream rule).
	streamTag   transport.Tag
	streamLarge int

	_ cpu.CacheLinePad // nor share a line with the next object
}

type sendItem struct {
	tag transport.Tag
	m   payload
	n   int // m's length
	req *transport.Req
	// pull: Isend published m's CMA descriptor already, as the ring's
	// pull-th; the sender goroutine only waits for the peer's pull.
	pull uint64
}

// payload is a message's bytes: one buffer, or the pieces of a vectored
// send (IsendV) in order, none empty.
type payload struct {
	one []byte
	vec [][]byte // nil for one buffer
}

// cursor reads a payload's bytes in order, across its pieces.
type cursor struct {
	vec [][]byte
	cur []byte // what is left of the current piece
}

func (m payload) cursor() cursor {
	if m.vec == nil {
		return cursor{cur: m.one}
	}
	return cursor{vec: m.vec[1:], cur: m.vec[0]}
}

// read fills dst with the next len(dst) bytes, which must be there.
func (c *cursor) read(dst []byte) {
	for len(dst) > 0 {
		for len(c.cur) == 0 {
			c.cur, c.vec = c.vec[0], c.vec[1:]
		}
		k := copy(dst, c.cur)
		dst, c.cur = dst[k:], c.cur[k:]
	}
}

// okReq is the result of every send that completed at once: sharing it
// keeps the fast path free of allocations.
var okReq = transport.Completed(nil)

// Connect maps the segments of rank cfg.Rank: it creates the segments of
// the rings it writes and opens those of the rings it reads, waiting (with
// backoff) until the peers have created them or ctx ends.
func Connect(ctx context.Context, cfg Config) (*Endpoint, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	e := &Endpoint{
		cfg: cfg, m: transport.NewMatcher(cfg.Size), peers: make([]*peer, cfg.Size),
		done: make(chan struct{}), wakeR: -1, wakeW: -1, maxMsg: uint64(cfg.MaxMessage),
	}
	if cfg.Spin > 0 {
		// A receive is completed by the peer's drainer goroutine: waiting
		// for it polls as the drainer does, so that a message that comes
		// within the spin costs no wake-up and no channel.
		e.spin = transport.NewSpinner(cfg.Spin)
		if cfg.Yield {
			e.spin = transport.NewYieldSpinner(cfg.Spin)
		}
		e.m.SetSpin(e.spin)
	}
	ok := false
	var created []string
	defer func() {
		if !ok {
			for _, name := range created {
				unix.Unlink(name)
			}
			e.release()
		}
	}()
	pid := os.Getpid()
	segSize := hdrSize + cfg.Slots*cfg.SlotSize
	for to := range cfg.Size {
		if to == cfg.Rank {
			continue
		}
		p := &peer{e: e, rank: to, pidfd: -1, wake: make(chan struct{}, 1), bgWake: make(chan struct{}, 1), bgIdle: helpIdle}
		e.peers[to] = p
		name := filepath.Join(cfg.Dir, SegmentName(cfg.JobID, cfg.Nonce, cfg.Rank, to))
		mem, err := create(name, segSize, cfg, pid)
		if err != nil {
			return nil, err
		}
		created = append(created, name)
		p.out, p.name = newRing(mem), name
	}
	for from := range cfg.Size {
		if from == cfg.Rank {
			continue
		}
		p := e.peers[from]
		name := filepath.Join(cfg.Dir, SegmentName(cfg.JobID, cfg.Nonce, from, cfg.Rank))
		mem, err := open(ctx, name, pid)
		if err != nil {
			return nil, &transport.PeerError{Op: "connect", Peer: from, Err: err}
		}
		p.in = newRing(mem)
		p.pid = p.in.writerPid
		if fd, err := unix.PidfdOpen(p.pid, 0); err == nil {
			p.pidfd = fd
		} else if err == unix.ESRCH {
			return nil, &transport.PeerError{Op: "connect", Peer: from, Err: fmt.Errorf("%w: process %d is gone", transport.ErrPeerClosed, p.pid)}
		}
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, fmt.Errorf("shm: pipe: %w", err)
	}
	e.wakeR, e.wakeW = fds[0], fds[1]
	ok = true
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		e.wg.Add(2)
		go p.drain()
		go p.sender()
	}
	if cfg.Size > 1 {
		e.wg.Add(1)
		go e.monitor()
	}
	return e, nil
}

// create makes, sizes and maps a segment we write, and marks it ready.
func create(name string, size int, cfg Config, pid int) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shm: create %s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Unlink(name)
		return nil, fmt.Errorf("shm: size %s: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Unlink(name)
		return nil, fmt.Errorf("shm: map %s: %w", name, err)
	}
	binary.LittleEndian.PutUint64(mem[offMagic:], magic)
	binary.LittleEndian.PutUint32(mem[offVersion:], version)
	binary.LittleEndian.PutUint32(mem[offSlotSize:], uint32(cfg.SlotSize))
	binary.LittleEndian.PutUint32(mem[offSlots:], uint32(cfg.Slots))
	binary.LittleEndian.PutUint32(mem[offWriterPid:], uint32(pid))
	u32(mem, offReady).Store(1)
	return mem, nil
}

// open waits for a peer's segment, maps it, checks its header, says we
// have it, and unlinks it: both sides have it mapped now.
func open(ctx context.Context, name string, pid int) ([]byte, error) {
	backoff := 100 * time.Microsecond
	for {
		mem, err := tryOpen(name)
		if err == nil {
			binary.LittleEndian.PutUint32(mem[offReaderPid:], uint32(pid))
			if err := unix.Unlink(name); err != nil && err != unix.ENOENT {
				unix.Munmap(mem)
				return nil, fmt.Errorf("shm: unlink %s: %w", name, err)
			}
			return mem, nil
		}
		if !errors.Is(err, errNotYet) {
			return nil, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("shm: waiting for %s: %w", name, ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

var errNotYet = errors.New("segment not ready")

func tryOpen(name string) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, errNotYet
	}
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("shm: stat %s: %w", name, err)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		return nil, fmt.Errorf("shm: %s belongs to uid %d with mode %#o: not a segment of this job", name, st.Uid, st.Mode&0o777)
	}
	if st.Size < hdrSize {
		return nil, errNotYet // the creator has not sized it yet
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %w", name, err)
	}
	if u32(mem, offReady).Load() == 0 {
		unix.Munmap(mem)
		return nil, errNotYet
	}
	if err := checkHeader(mem); err != nil {
		unix.Munmap(mem)
		return nil, fmt.Errorf("%w: segment %s: %v", transport.ErrProtocol, name, err)
	}
	return mem, nil
}

// checkHeader checks the layout a segment's header announces against the
// mapping's size, so that no later index can leave the mapping.
func checkHeader(mem []byte) error {
	if m := binary.LittleEndian.Uint64(mem[offMagic:]); m != magic {
		return fmt.Errorf("bad magic %#x", m)
	}
	if v := binary.LittleEndian.Uint32(mem[offVersion:]); v != version {
		return fmt.Errorf("version %d, want %d", v, version)
	}
	ss := uint64(binary.LittleEndian.Uint32(mem[offSlotSize:]))
	n := uint64(binary.LittleEndian.Uint32(mem[offSlots:]))
	if ss < 64 || ss%64 != 0 || n == 0 || n > 1<<20 {
		return fmt.Errorf("slots of %d bytes, %d slots", ss, n)
	}
	if uint64(len(mem)) != hdrSize+ss*n {
		return fmt.Errorf("%d bytes for %d slots of %d bytes", len(mem), n, ss)
	}
	return nil
}

// Rank implements transport.Endpoint.
func (e *Endpoint) Rank() int { return e.cfg.Rank }

// Size implements transport.Endpoint.
func (e *Endpoint) Size() int { return e.cfg.Size }

// OnStray implements transport.StrayReporter.
func (e *Endpoint) OnStray(finished func(transport.Tag) bool, report func(from int, tag transport.Tag, head []byte)) {
	e.m.SetStray(finished, report)
}

// Retire implements transport.StrayReporter.
func (e *Endpoint) Retire(tag transport.Tag) { e.m.Retire(tag) }

// OnPeerLoss implements transport.PeerLossNotifier: f is called when a
// peer's process dies or breaks the protocol, not when it closes its
// endpoint.
func (e *Endpoint) OnPeerLoss(f func(*transport.PeerError)) { e.onLoss.Store(&f) }

// Irecv implements transport.Endpoint.
func (e *Endpoint) Irecv(from int, tag transport.Tag, b []byte) transport.Request {
	r := e.m.Post(from, tag, b)
	if e.cfg.Help && e.spin != nil && from != e.cfg.Rank {
		if pr, ok := r.(*transport.PostedRecv); ok && !pr.IsDone() {
			if p := e.peers[from]; p != nil {
				h := helpRecvs.Get().(*helpRecv)
				h.PostedRecv, h.p = pr, p
				return h
			}
		}
	}
	return r
}

// Isend implements transport.Endpoint. A message that fits in the ring's
// free slots is copied in at once and the send is complete when Isend
// returns; a longer one is pulled by the receiver with process_vm_readv
// when it has CMAThreshold bytes or more, else copied by the peer's sender
// goroutine as the reader frees slots.
func (e *Endpoint) Isend(to int, tag transport.Tag, b []byte) transport.Request {
	return e.isend(to, tag, payload{one: b}, len(b))
}

var _ transport.VecEndpoint = (*Endpoint)(nil)

// IsendV implements transport.VecEndpoint: the pieces are copied into
// the ring in turn, or, for a message the peer pulls, published as one
// descriptor of several buffers that the peer reads with one
// process_vm_readv (at most maxPullIov of them; a message of more
// pieces goes by copy through the ring).
func (e *Endpoint) IsendV(to int, tag transport.Tag, bufs [][]byte) transport.Request {
	var m payload
	n := 0
	for _, b := range bufs {
		if len(b) > 0 {
			m.vec = append(m.vec, b)
			n += len(b)
		}
	}
	switch len(m.vec) {
	case 0:
		m = payload{one: []byte{}}
	case 1:
		m = payload{one: m.vec[0]}
	}
	if m.vec != nil && to == e.cfg.Rank {
		b := make([]byte, n) // a message to oneself goes by the matcher, whole
		transport.Gather(b, m.vec)
		m = payload{one: b}
	}
	return e.isend(to, tag, m, n)
}

// IrecvV implements transport.VecEndpoint: a pulled message is read
// straight into the pieces (process_vm_readv scatters), a copied one
// copied out of the slots into them in turn.
func (e *Endpoint) IrecvV(from int, tag transport.Tag, bufs [][]byte) transport.Request {
	return e.m.PostV(from, tag, bufs)
}

// Vectored implements transport.VecEndpoint: every message to another
// rank goes vectored without a copy of its own.
func (e *Endpoint) Vectored(peer int) bool {
	return peer >= 0 && peer < e.cfg.Size && peer != e.cfg.Rank
}

func (e *Endpoint) isend(to int, tag transport.Tag, m payload, n int) transport.Request {
	if err := transport.CheckPeer("send", to, e.cfg.Size); err != nil {
		return transport.Completed(err)
	}
	if e.closing.Load() {
		return transport.Completed(transport.ErrClosed)
	}
	if to == e.cfg.Rank {
		if err := e.m.Deliver(to, tag, m.one); err != nil {
			return transport.Completed(transport.ErrClosed)
		}
		return okReq
	}
	if uint64(n) > e.maxMsg {
		return transport.Completed(&transport.PeerError{Op: "send", Peer: to,
			Err: fmt.Errorf("message of %d bytes exceeds MaxMessage %d", n, e.maxMsg)})
	}
	p := e.peers[to]
	p.mu.Lock()
	if e.closing.Load() {
		p.mu.Unlock()
		return transport.Completed(transport.ErrClosed)
	}
	if p.sendErr == nil {
		if err := p.linkErr(); err != nil {
			p.sendErr = err
		}
	}
	if p.sendErr != nil {
		err := p.sendErr
		p.mu.Unlock()
		return transport.Completed(err)
	}
	// A message that fits in the free slots is copied in now, whatever
	// its size: one copy in here and one out by the drainer, with no
	// hand-off, beat a pull with process_vm_readv (which pins the pages
	// of every call) for the messages a ring holds (doc.go, "Large
	// messages"). A large message goes by CMA where it would have to wait
	// for slots, or where it is one of a stream under its tag.
	idle := !p.busy && p.qhead == len(p.queue)
	if idle && !p.streaming(tag, m, n) && p.out.free() >= p.out.slotsFor(n) {
		p.out.write(tag, m, n)
		e.copySent.Add(1)
		p.mu.Unlock()
		return okReq
	}
	r := transport.NewRequest()
	it := sendItem{tag: tag, m: m, n: n, req: r}
	if idle && p.pullable(m, n) && p.out.free() > 0 {
		// A message the peer pulls: its descriptor is published now,
		// so that the peer can start pulling at once. Left to the
		// sender goroutine, it waited until this goroutine let go of
		// the processor (a rank bound to one core runs with GOMAXPROCS
		// 1), while the peer waited for it (BENCHMARKS.md, 64 MiB).
		it.pull = p.publishCMA(tag, m, n)
	}
	p.queue = append(p.queue, it)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return r
}

// linkErr says why sends to p cannot go on, or nil.
func (p *peer) linkErr() error {
	switch {
	case p.e.closing.Load():
		return transport.ErrClosed
	case p.out.readerGone.Load() != 0 || p.dead.Load() || p.lost.Load():
		return &transport.PeerError{Op: "send", Peer: p.rank, Err: transport.ErrPeerClosed}
	}
	return nil
}

// free returns the number of free slots; a tail out of range counts as
// none (the reader will be found out by its own checks, or never reads).
func (r *ring) free() uint64 {
	t := r.tail.Load()
	if t > r.pos || r.pos-t > r.slots {
		return 0
	}
	return r.slots - (r.pos - t)
}

func (r *ring) slotsFor(n int) uint64 {
	if n == 0 {
		return 1
	}
	return (uint64(n) + uint64(r.cap) - 1) / uint64(r.cap)
}

// write copies a message of total bytes that fits in the free slots and
// publishes it.
func (r *ring) write(tag transport.Tag, m payload, total int) {
	if m.vec == nil {
		r.writeOne(tag, m.one)
		return
	}
	c, left := m.cursor(), total
	first := true
	for first || left > 0 {
		n := min(left, int(r.cap))
		h := slotHdr{kind: kindCont, chunk: uint32(n)}
		if first {
			h = slotHdr{kind: kindFirst, chunk: uint32(n), tag: tag, total: uint64(total)}
			first = false
		}
		s := r.slot(r.pos)
		putSlot(s, h)
		c.read(s[slotHdrSize : slotHdrSize+n])
		left -= n
		r.pos++
	}
	r.publish()
}

// writeOne is write for a message of one buffer, the common case: each
// slot's bytes in one copy, with no cursor to step. It repeats write's
// loop on purpose: with write alone the 16 KiB pooled allreduce over shm
// took 1.029x as long (40 alternated rounds, 5 layouts; BENCHMARKS.md).
func (r *ring) writeOne(tag transport.Tag, b []byte) {
	first := true
	for first || len(b) > 0 {
		n := min(len(b), int(r.cap))
		h := slotHdr{kind: kindCont, chunk: uint32(n)}
		if first {
			h = slotHdr{kind: kindFirst, chunk: uint32(n), tag: tag, total: uint64(len(b))}
			first = false
		}
		s := r.slot(r.pos)
		putSlot(s, h)
		copy(s[slotHdrSize:], b[:n])
		b = b[n:]
		r.pos++
	}
	r.publish()
}

// publish makes the slots written so far visible and wakes a parked reader.
func (r *ring) publish() {
	r.head.Store(r.pos)
	if r.readerSleep.Load() != 0 {
		kick(r.dataSeq)
	}
}

// sender writes the messages queued for p, waiting for free slots.
func (p *peer) sender() {
	defer p.e.wg.Done()
	for {
		select {
		case <-p.wake:
		case <-p.e.done:
			return
		}
		for {
			p.mu.Lock()
			if p.qhead == len(p.queue) || p.sendErr != nil || p.e.closing.Load() {
				p.busy = false
				p.failQueueLocked()
				p.mu.Unlock()
				break
			}
			it := p.queue[p.qhead]
			p.queue[p.qhead] = sendItem{}
			p.qhead++
			if p.qhead == len(p.queue) {
				p.queue, p.qhead = p.queue[:0], 0
			}
			p.busy = true
			p.mu.Unlock()
			var err error
			if it.pull != 0 {
				err = p.sendPulled(it.tag, it.m, it.n, it.pull)
			} else {
				err = p.send(it.tag, it.m, it.n)
			}
			if err != nil {
				p.mu.Lock()
				if p.sendErr == nil {
					p.sendErr = err
				}
				p.mu.Unlock()
			}
			it.req.Complete(err)
		}
	}
}

// failQueueLocked fails the queued sends once sends cannot go on.
func (p *peer) failQueueLocked() {
	err := p.sendErr
	if p.e.closing.Load() {
		err = transport.ErrClosed
	}
	if err == nil {
		return
	}
	for _, it := range p.queue[p.qhead:] {
		if it.pull != 0 {
			p.awaitPull(it.m, it.pull) // the peer must not pull m once the send is over
		}
		it.req.Complete(err)
	}
	clear(p.queue)
	p.queue, p.qhead = p.queue[:0], 0
}

// copyFirst is how many messages of CMAThreshold bytes or more under one tag
// Isend copies in when they fit; the next ones under that tag go by CMA.
// Only the messages sent while nothing is queued count (those that could be
// copied in); a queued one goes by CMA anyway. A collective's messages share
// its tag: a large call that streams its data in segments (64 MiB by ring:
// 256 KiB segments, a hundred under one tag) goes by CMA after its first
// few, where one copy in and one out of data no longer in cache cost more
// than a pull, and a call of a few large messages (a 2-rank allreduce of 1
// MiB: two of 512 KiB) is copied whole.
const copyFirst = 4

// streaming counts a send of n bytes under tag and reports whether it is
// one of a stream of large messages under that tag, past copyFirst, which
// goes by CMA even when it fits in the ring. p.mu is held.
func (p *peer) streaming(tag transport.Tag, m payload, n int) bool {
	if !p.pullable(m, n) {
		return false
	}
	if tag != p.streamTag {
		p.streamTag, p.streamLarge = tag, 0
	}
	p.streamLarge++
	return p.streamLarge > copyFirst
}

// PullSegmentBytes is the piece size the Endpoint asks the pipelined
// algorithms to cut large messages into (transport.SegmentHinter) where
// its receivers pull them: each piece is one hand-off (a descriptor, a
// pull that pins the pages, a done word, a wake-up), and a 2-rank
// allreduce of 4 MiB took 0.54 of the time in 4 MiB pieces that it took
// in 256 KiB ones, 64 MiB 0.74, 1 MiB 0.88 (BENCHMARKS.md).
const PullSegmentBytes = 4 << 20

var _ transport.SegmentHinter = (*Endpoint)(nil)

// SegmentBytes implements transport.SegmentHinter: PullSegmentBytes to a
// peer where large messages go by cross-memory attach (Config's
// CMAThreshold, not the kernel's answer, which comes later and may differ
// between ranks), else 0.
func (e *Endpoint) SegmentBytes(peer int) int {
	if peer < 0 || peer >= e.cfg.Size || peer == e.cfg.Rank || e.cfg.CMAThreshold <= 0 {
		return 0
	}
	return PullSegmentBytes
}

// cma says whether a message of n bytes to p goes by cross-memory attach.
func (p *peer) cma(n int) bool {
	t := p.e.cfg.CMAThreshold
	return t > 0 && n >= t && !p.cmaOff.Load()
}

// maxPullIov is the most buffers one descriptor names (a vectored
// send's pieces): process_vm_readv takes at most IOV_MAX (1024) remote
// buffers a call, and the descriptor's pairs must fit in one slot.
const maxPullIov = 1024

// pullable says whether message m of n bytes to p goes by cross-memory
// attach: its size does (cma), and a vectored one's pieces fit in one
// descriptor.
func (p *peer) pullable(m payload, n int) bool {
	if !p.cma(n) {
		return false
	}
	return m.vec == nil || len(m.vec) <= min(maxPullIov, int(p.out.cap)/cmaIovSize)
}

// send sends a message from the sender goroutine: by CMA, its address
// published and the sender waiting until the reader has copied it with
// process_vm_readv, or else by copy through the ring.
func (p *peer) send(tag transport.Tag, m payload, n int) error {
	if p.pullable(m, n) {
		if p.out.free() == 0 {
			if err := p.waitSpace(); err != nil {
				return err
			}
		}
		return p.sendPulled(tag, m, n, p.publishCMA(tag, m, n))
	}
	p.e.copySent.Add(1)
	return p.writeWaiting(tag, m, n)
}

// sendPulled ends a send whose descriptor is published (the pull-th): it
// waits for the peer's pull, and sends m by copy if the peer refused.
func (p *peer) sendPulled(tag transport.Tag, m payload, n int, pull uint64) error {
	refused, err := p.awaitPull(m, pull)
	if !refused {
		return err
	}
	p.e.copySent.Add(1)
	return p.writeWaiting(tag, m, n)
}

// publishCMA writes m's descriptor into the ring's next slot, which is
// free, publishes it, and returns its number among the descriptors: the
// address of one buffer (kindCMA), or the address and length of each
// piece of a vectored send (kindCMAV).
func (p *peer) publishCMA(tag transport.Tag, m payload, n int) uint64 {
	r := p.out
	s := r.slot(r.pos)
	if m.vec == nil {
		putSlot(s, slotHdr{kind: kindCMA, chunk: cmaDescSize, tag: tag, total: uint64(n)})
		binary.LittleEndian.PutUint64(s[slotHdrSize:], uint64(uintptr(unsafe.Pointer(&m.one[0]))))
	} else {
		putSlot(s, slotHdr{kind: kindCMAV, chunk: uint32(len(m.vec) * cmaIovSize), tag: tag, total: uint64(n)})
		d := s[slotHdrSize:]
		for i, b := range m.vec {
			binary.LittleEndian.PutUint64(d[i*cmaIovSize:], uint64(uintptr(unsafe.Pointer(&b[0]))))
			binary.LittleEndian.PutUint64(d[i*cmaIovSize+8:], uint64(len(b)))
		}
	}
	r.pos++
	r.cmaSeq++
	// The state word before head: the reader claims the descriptor only
	// after it has seen the slot, so it always finds the word published.
	r.cmaState.Store(cmaWord(r.cmaSeq, cmaPublished))
	r.publish()
	return r.cmaSeq
}

// awaitPull waits until the reader has pulled b, published as the
// want-th descriptor, or said it cannot (refused: send it by copy). It
// never waits for a reader that is gone, or once the endpoint closes: it
// revokes the descriptor then (cmaRevoke), and if the revoke wins, the
// reader will not use what it may still copy, so b is the caller's again
// at once, however long the reader stays stopped. If the reader ended
// the pull first, that is the outcome.
func (p *peer) awaitPull(m payload, want uint64) (refused bool, err error) {
	r := p.out
	done := func() bool { return cmaEnded(r.cmaState, want) }
	ready := func() bool {
		return done() || r.readerGone.Load() != 0 || p.dead.Load() || p.lost.Load() || p.e.closing.Load()
	}
	if !spinFor(p.e.cfg.Spin, p.e.cfg.Yield, ready) {
		park(r.spaceSeq, r.writerSleep, ready)
	}
	st := cmaRevoke(r.cmaState, want) // the pull's state if it ended first
	runtime.KeepAlive(m.one)
	runtime.KeepAlive(m.vec)
	switch st {
	case cmaRevoked:
		if err := p.linkErr(); err != nil {
			return false, err
		}
		return false, transport.ErrClosed
	case cmaRefused:
		p.cmaOff.Store(true)
		return true, nil
	}
	p.e.cmaSent.Add(1)
	if p.e.closing.Load() {
		return false, transport.ErrClosed
	}
	return false, nil
}

// writeWaiting writes a message of any length, publishing slot by slot
// and waiting for the reader to free slots.
func (p *peer) writeWaiting(tag transport.Tag, m payload, total int) error {
	r := p.out
	c, left := m.cursor(), total
	first := true
	for first || left > 0 {
		if r.free() == 0 {
			if err := p.waitSpace(); err != nil {
				return err
			}
		}
		for k := r.free(); k > 0 && (first || left > 0); k-- {
			n := min(left, int(r.cap))
			h := slotHdr{kind: kindCont, chunk: uint32(n)}
			if first {
				h = slotHdr{kind: kindFirst, chunk: uint32(n), tag: tag, total: uint64(total)}
				first = false
			}
			s := r.slot(r.pos)
			putSlot(s, h)
			c.read(s[slotHdrSize : slotHdrSize+n])
			left -= n
			r.pos++
		}
		r.publish()
	}
	return nil
}

func (p *peer) waitSpace() error {
	r := p.out
	ready := func() bool { return r.free() > 0 || p.linkErr() != nil }
	if !spinFor(p.e.cfg.Spin, p.e.cfg.Yield, ready) {
		park(r.spaceSeq, r.writerSleep, ready)
	}
	if r.free() > 0 {
		return nil
	}
	return p.linkErr()
}

// drain reads p's ring and hands its messages to the matcher, until the
// peer leaves or dies, the ring breaks the protocol, or Close.
func (p *peer) drain() {
	defer p.e.wg.Done()
	help := p.e.cfg.Help
	for {
		if help && !p.awaitHelped() {
			continue // a helper took the message
		}
		err := p.step()
		if help {
			p.drainMu.Unlock()
		}
		if err != nil {
			p.end(err)
			return
		}
	}
}

// step takes the ring's next message, waiting for it (next), and hands it
// to the matcher.
func (p *peer) step() error {
	r := p.in
	if err := p.next(); err != nil {
		return err
	}
	h, err := parseSlot(r.hdrBuf[:], r.cap, p.e.maxMsg, 0)
	if err != nil {
		return err
	}
	if h.kind == kindCMA || h.kind == kindCMAV {
		err := p.descriptor(h)
		p.release()
		if err == nil {
			err = p.pull(h.tag, int(h.total))
		}
		return err
	}
	r.chunkLeft = int(h.chunk)
	r.msgLeft = h.total - uint64(h.chunk)
	if err := p.e.m.DeliverFrom(p.rank, h.tag, int(h.total), p, p.failRecv); err != nil {
		return err
	}
	p.release()
	return nil
}

// Helping (Config.Help): a message the drainer delivers reaches the
// caller only once the caller's goroutine runs again: with a P a rank
// (GOMAXPROCS 1) the two hand the P to each other with runtime.Gosched on
// every message, and where ranks outnumber cores the drainer is one more
// thread taking turns on the cores. So a caller that waits on a receive
// from the peer polls the ring itself and takes each message whose slots
// are all published (helpStep), as transport/tcp's waiter reads its
// socket; meanwhile the drainer does not poll (awaitHelped). Anything
// else (a message still being written, a descriptor to pull, the end of
// the link) the helper leaves to the drainer, which it wakes.

// helpIdle is the longest the drainer sleeps while callers help: a
// message that arrives when no caller waits on the peer any more waits
// at most this long for the drainer.
const helpIdle = time.Millisecond

// helpIdleMax is the longest a drainer that stands back (Config.StandBack)
// sleeps while no caller waits on its peer, its sleeps doubling from
// helpIdle while it finds nothing: idle, a rank's drainers would
// otherwise wake a thousand times a second each.
const helpIdleMax = 16 * time.Millisecond

// awaitHelped waits for the ring's next slot (or the end of the link) and
// returns with drainMu held for step to take it, or false if a helper
// took it first. While callers help (with Config.StandBack: always) it
// sleeps on bgWake, for at most helpIdle (standing back while no caller
// waits, longer) or until a helper wakes it; else it polls and parks as
// next does. The sleep is the runtime's (a channel and a timer), not a futex
// in a system call: a goroutine blocked in a system call keeps its P
// until the runtime's monitor takes it back, up to 10 ms later, and with
// two drainers asleep so on two Ps the caller they wait for had none.
func (p *peer) awaitHelped() bool {
	r := p.in
	ready := func() bool {
		return r.head.Load() != r.tail.Load() || p.e.closing.Load() || p.dead.Load() || r.writerGone.Load() != 0
	}
	helped := func() bool { return p.helpers.Load() > 0 || p.e.cfg.StandBack }
	busy := func() bool { return ready() || helped() }
	for !ready() {
		if !helped() {
			if !spinFor(p.e.cfg.Spin, p.e.cfg.Yield, busy) {
				park(r.dataSeq, r.readerSleep, busy)
			}
			continue
		}
		select {
		case <-p.bgWake: // stale: taken before the conditions are read
		default:
		}
		if !ready() && helped() {
			// A drainer that stands back while no caller waits on the
			// peer sleeps longer each time it finds nothing: a caller
			// that waits later takes the message itself, or wakes it.
			// Not after a caller stopped waiting before its message
			// came (unhelped): that caller waits on the drainer. Not
			// the writer's futex either: a goroutine blocked in a
			// system call keeps the rank's one P, and the caller it
			// readies would wait for the runtime's monitor to take it.
			d := helpIdle
			if p.e.cfg.StandBack && p.helpers.Load() == 0 && !p.unhelped.Load() {
				d = p.bgIdle
				p.bgIdle = min(2*p.bgIdle, helpIdleMax)
			}
			if p.bgTimer == nil {
				p.bgTimer = time.NewTimer(d)
			} else {
				p.bgTimer.Reset(d)
			}
			select {
			case <-p.bgWake:
				p.bgIdle = helpIdle
			case <-p.bgTimer.C:
			}
			p.bgTimer.Stop()
		}
	}
	p.bgIdle = helpIdle
	if !p.drainMu.TryLock() {
		// A helper is taking a message. Not Lock: a goroutine that
		// blocks on a mutex is woken through the scheduler, a thread
		// wake-up a message where ranks outnumber cores.
		runtime.Gosched()
		transport.OSYield()
		return false
	}
	if r.head.Load() == r.pos && !p.e.closing.Load() && !p.dead.Load() && r.writerGone.Load() == 0 {
		p.drainMu.Unlock()
		return false
	}
	return true
}

// helpStep takes the ring's next message for a caller that waits on a
// receive from p, if no one else is taking one and all its slots are
// published, and says how it went: took it, found the ring empty, or
// found the drainer busy or its due (a message still being written, a
// descriptor to pull: any such slot wakes the drainer).
//
// Only under drainMu, once the endpoint is not closing, does it touch the
// ring: Close takes drainMu after it has set closing and before it unmaps
// the rings (a caller may still be waiting when another goroutine closes
// the endpoint).
func (p *peer) helpStep() helpOutcome {
	if !p.drainMu.TryLock() {
		return helpBusy
	}
	defer p.drainMu.Unlock()
	if p.e.closing.Load() || p.dead.Load() || p.lost.Load() {
		return helpBusy
	}
	r := p.in
	h := r.head.Load()
	if h == r.pos {
		return helpEmpty
	}
	if h-r.pos > r.slots {
		p.wakeDrainer() // a broken ring: the drainer says so
		return helpBusy
	}
	s := r.slot(r.pos)
	copy(r.hdrBuf[:], s[:slotHdrSize])
	hd, err := parseSlot(r.hdrBuf[:], r.cap, p.e.maxMsg, 0)
	// A message whose every slot is published already: its later slots
	// are read (Read, next) without a wait. Where ranks outnumber cores,
	// one slot's only, unless the drainer stands back: taking longer ones
	// measured no better while it polled (4 ranks on 2 cores, 1 MiB:
	// 218-945 us against 220-353).
	n := (hd.total + uint64(r.cap) - 1) / uint64(r.cap)
	whole := err == nil && hd.kind == kindFirst && h-r.pos >= n && (n <= 1 || !p.e.cfg.Yield || p.e.cfg.StandBack)
	if !whole {
		p.wakeDrainer() // the slot is the drainer's
		return helpBusy
	}
	r.chunkOff = int(hdrSize+(r.pos%r.slots)*r.slotSize) + slotHdrSize
	r.held = true
	r.chunkLeft, r.msgLeft = int(hd.chunk), hd.total-uint64(hd.chunk)
	// Reading published slots cannot fail: DeliverFrom's error is only
	// its reader's.
	p.e.m.DeliverFrom(p.rank, hd.tag, int(hd.total), p, p.failRecv)
	p.release()
	p.helped.Add(1)
	return helpTook
}

// Outcomes of helpStep.
type helpOutcome int

const (
	helpTook  helpOutcome = iota // delivered the next message
	helpEmpty                    // nothing published
	helpBusy                     // the drainer's turn: it holds the ring, or the slot is its
)

// wakeDrainer wakes the drainer where it sleeps while callers help.
func (p *peer) wakeDrainer() {
	select {
	case p.bgWake <- struct{}{}:
	default:
	}
}

// helpRecv is a receive from a peer under Config.Help: its waiter helps.
type helpRecv struct {
	*transport.PostedRecv
	p *peer
}

// helpRecvs holds released helpRecvs for reuse.
var helpRecvs = sync.Pool{New: func() any { return new(helpRecv) }}

// Wait polls for the receive, taking the peer's messages off the ring
// meanwhile (helpStep), for the endpoint's spin time; then it waits as a
// posted receive does.
func (h *helpRecv) Wait(ctx context.Context) error {
	r, p := h.PostedRecv, h.p
	if !r.IsDone() {
		p.helpers.Add(1)
		if p.unhelped.Load() {
			p.unhelped.Store(false)
		}
		var done bool
		if p.e.cfg.Yield {
			done = p.e.spin.Wait(func() bool { return r.IsDone() || p.helpStep() == helpTook && r.IsDone() })
		} else {
			done = p.helpWait(r)
		}
		if p.helpers.Add(-1) == 0 && !done {
			p.unhelped.Store(true)
			p.wakeDrainer() // this caller stops polling: the drainer takes over now
		}
	}
	return r.Wait(ctx)
}

// helpWait is a helper's wait where each rank has a core: it polls r,
// taking the peer's messages, for the spin time, and gives the P to the
// process's other goroutines when the drainer has the ring (a message in
// the making, a pull: with GOMAXPROCS 1 it runs only then) and otherwise
// every helpPass polls. Spinner.Wait gives it away between every two:
// each runtime.Gosched takes the scheduler's lock twice and looks for an
// idle P to wake, which cost as much as the message where the poll itself
// delivers it.
func (p *peer) helpWait(r *transport.PostedRecv) bool {
	s := p.e.spin
	now := time.Now()
	d := s.Begin(now) // 0 while spinning is paused (transport.Spinner)
	if d <= 0 {
		return r.IsDone() || p.helpStep() == helpTook && r.IsDone()
	}
	end, last := now.Add(d), now
	for i := 1; ; i++ {
		if r.IsDone() {
			s.End(last, true, false)
			return true
		}
		st := p.helpStep()
		if st == helpTook && r.IsDone() {
			s.End(last, true, false)
			return true
		}
		if st == helpBusy || i%helpPass == 0 {
			// The drainer's turn, or a pass of the P now and then.
			runtime.Gosched()
			t := time.Now()
			// A gap: this thread lost its core, to the drainer's pull
			// in a system call, say; polling on would take it back.
			if gap, over := t.Sub(last) > transport.SpinGap, t.After(end); gap || over {
				s.End(t, false, gap)
				return false
			}
			last = t
		}
	}
}

// helpPass is how many polls helpWait makes between two passes of the P.
const helpPass = 64

// Release implements transport.Releaser: a completed receive goes back to
// the matcher and h to helpRecvs; a pending one is left alone.
func (h *helpRecv) Release() {
	pr := h.PostedRecv
	if !pr.IsDone() {
		return
	}
	*h = helpRecv{}
	pr.Release()
	helpRecvs.Put(h)
}

// descriptor reads the held descriptor slot of header h into p.riov,
// checking that a vectored one's buffers are not empty and add up to its
// total.
func (p *peer) descriptor(h slotHdr) error {
	d := p.in.mem[p.in.chunkOff:][:h.chunk]
	p.riov = p.riov[:0]
	if h.kind == kindCMA {
		p.riov = append(p.riov, unix.RemoteIovec{Base: uintptr(binary.LittleEndian.Uint64(d)), Len: int(h.total)})
		return nil
	}
	var sum uint64
	for i := 0; i < len(d); i += cmaIovSize {
		addr, n := binary.LittleEndian.Uint64(d[i:]), binary.LittleEndian.Uint64(d[i+8:])
		if n == 0 || n > h.total-sum {
			return fmt.Errorf("%w: cma descriptor's buffer %d of %d bytes in a message of %d", transport.ErrProtocol, i/cmaIovSize, n, h.total)
		}
		sum += n
		p.riov = append(p.riov, unix.RemoteIovec{Base: uintptr(addr), Len: int(n)})
	}
	if sum != h.total {
		return fmt.Errorf("%w: cma descriptor's buffers hold %d bytes of a message of %d", transport.ErrProtocol, sum, h.total)
	}
	return nil
}

// pull copies a message of n bytes at p.riov in the peer's memory with
// process_vm_readv into the posted receive, or into a buffer for the
// unexpected queue, then tells the sender it may reuse its buffer. The
// first time, a one-byte probe finds out whether the kernel lets this
// rank read the peer; if not the sender is told to send by copy, and the
// message comes next through the ring. The descriptor is claimed
// (cmaClaim) before the peer's memory is read and ended (cmaFinish)
// after: a descriptor the sender revoked is not read, and what was read
// of one it revoked meanwhile is dropped; either way the drain ends with
// errRevoked.
func (p *peer) pull(tag transport.Tag, n int) error {
	addr := p.riov[0].Base
	r := p.in
	r.cmaSeq++
	k := r.cmaSeq
	if err := cmaClaim(r.cmaState, k); err != nil {
		return err
	}
	if !p.cmaChecked {
		if err := p.readv(p.probe[:], addr); err != nil {
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS) {
				if !p.cmaDone(k, cmaRefused) {
					return errRevoked
				}
				p.e.cmaRefused.Add(1)
				return nil
			}
			if !p.cmaDone(k, cmaPulled) {
				return errRevoked
			}
			return p.cmaErr(err)
		}
		p.cmaChecked = true
	}
	if pr := p.e.m.Claim(p.rank, tag); pr != nil {
		local := pr.Bufs()
		if local == nil {
			p.lone[0] = pr.Buf()
			local = p.lone[:]
		}
		want := pr.Len()
		m := min(want, n)
		err := p.readvv(local, m)
		p.lone[0] = nil
		if !p.cmaDone(k, cmaPulled) {
			pr.Complete(p.failRecv(errRevoked))
			return errRevoked
		}
		switch {
		case err != nil:
			err = p.cmaErr(err)
			pr.Complete(p.failRecv(err))
			return err
		case m != n:
			pr.Complete(transport.LengthError(p.rank, want, n))
		default:
			p.e.cmaPulled.Add(1)
			pr.Complete(nil)
		}
		return nil
	}
	buf := scratch.Get(n)
	p.lone[0] = buf
	err := p.readvv(p.lone[:], n)
	p.lone[0] = nil
	if !p.cmaDone(k, cmaPulled) {
		scratch.Put(buf)
		return errRevoked
	}
	if err != nil {
		scratch.Put(buf)
		return p.cmaErr(err)
	}
	p.e.cmaPulled.Add(1)
	_ = p.e.m.DeliverOwned(p.rank, tag, buf) // an aborted matcher drops it
	return nil
}

// readv reads len(b) bytes at addr in the peer's memory into b (the
// probe: once a peer).
func (p *peer) readv(b []byte, addr uintptr) error {
	for len(b) > 0 {
		liov := []unix.Iovec{{Base: &b[0]}}
		liov[0].SetLen(len(b))
		riov := []unix.RemoteIovec{{Base: addr, Len: len(b)}}
		n, err := p.e.cfg.readv(p.pid, liov, riov, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		b, addr = b[n:], addr+uintptr(n)
	}
	return nil
}

// readvv reads the first m bytes of the peer's buffers p.riov into the
// local buffers in turn, with as few process_vm_readv calls as the
// kernel allows (IOV_MAX buffers a side, partial reads resumed).
func (p *peer) readvv(local [][]byte, m int) error {
	li, loff := 0, 0                 // local position: buffer li, byte loff
	ri, roff := 0, 0                 // remote position
	defer func() { clear(p.liov) }() // keep no pointer to the user's buffers
	for m > 0 {
		p.liov = p.liov[:0]
		for i, off, k := li, loff, 0; i < len(local) && k < m && len(p.liov) < maxPullIov; i, off = i+1, 0 {
			b := local[i][off:]
			if len(b) == 0 {
				continue
			}
			b = b[:min(len(b), m-k)]
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			p.liov = append(p.liov, v)
			k += len(b)
		}
		remote := p.rwin[:0]
		for i, off, k := ri, roff, 0; i < len(p.riov) && k < m && len(remote) < maxPullIov; i, off = i+1, 0 {
			v := p.riov[i]
			v.Base += uintptr(off)
			v.Len = min(v.Len-off, m-k)
			remote = append(remote, v)
			k += v.Len
		}
		p.rwin = remote
		n, err := p.e.cfg.readv(p.pid, p.liov, remote, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		m -= n
		for k := n; k > 0; {
			c := min(k, len(local[li])-loff)
			k, loff = k-c, loff+c
			if loff == len(local[li]) {
				li, loff = li+1, 0
			}
		}
		for k := n; k > 0; {
			c := min(k, p.riov[ri].Len-roff)
			k, roff = k-c, roff+c
			if roff == p.riov[ri].Len {
				ri, roff = ri+1, 0
			}
		}
	}
	return nil
}

// cmaDone ends descriptor k, which this reader claimed, in state st and
// wakes the sender; false: the sender revoked it meanwhile.
func (p *peer) cmaDone(k, st uint64) bool {
	r := p.in
	ok := cmaFinish(r.cmaState, k, st)
	if ok && r.writerSleep.Load() != 0 {
		kick(r.spaceSeq)
	}
	return ok
}

// cmaErr classifies a failed process_vm_readv: the peer is gone, or it
// published an address it cannot be read at.
func (p *peer) cmaErr(err error) error {
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("%w: process %d exited", transport.ErrPeerClosed, p.pid)
	}
	return fmt.Errorf("%w: process_vm_readv of the announced buffer: %v", transport.ErrProtocol, err)
}

// errLeft: the peer closed its endpoint and the ring is empty.
var errLeft = errors.New("peer left")

// next waits for the next slot, takes its header, and holds it.
func (p *peer) next() error {
	r := p.in
	ready := func() bool {
		return r.head.Load() != r.pos || p.e.closing.Load() || p.dead.Load() || r.writerGone.Load() != 0
	}
	if !spinFor(p.e.cfg.Spin, p.e.cfg.Yield, ready) {
		park(r.dataSeq, r.readerSleep, ready)
	}
	if p.e.closing.Load() {
		return transport.ErrClosed
	}
	gone := r.writerGone.Load() != 0 // before head: all it wrote is published
	h := r.head.Load()
	if h == r.pos {
		if gone {
			return errLeft
		}
		return fmt.Errorf("%w: process %d exited", transport.ErrPeerClosed, p.pid)
	}
	if h < r.pos || h-r.pos > r.slots {
		return fmt.Errorf("%w: %v: head %d, tail %d, %d slots", transport.ErrProtocol, errCorruptIndex, h, r.pos, r.slots)
	}
	s := r.slot(r.pos)
	copy(r.hdrBuf[:], s[:slotHdrSize])
	r.chunkOff = int(hdrSize+(r.pos%r.slots)*r.slotSize) + slotHdrSize
	r.held = true
	return nil
}

// release frees the held slot for the writer.
func (p *peer) release() {
	r := p.in
	if !r.held {
		return
	}
	r.held = false
	r.pos++
	r.tail.Store(r.pos)
	if r.writerSleep.Load() != 0 {
		kick(r.spaceSeq)
	}
}

// Read implements io.Reader over the payload of the message being drained,
// for Matcher.DeliverFrom: it copies out of the slots and frees each one
// as soon as it is copied.
func (p *peer) Read(b []byte) (int, error) {
	r := p.in
	n := 0
	for n < len(b) {
		if r.chunkLeft == 0 {
			p.release()
			if r.msgLeft == 0 {
				return n, io.ErrUnexpectedEOF
			}
			if err := p.next(); err != nil {
				return n, err
			}
			h, err := parseSlot(r.hdrBuf[:], r.cap, p.e.maxMsg, r.msgLeft)
			if err != nil {
				return n, err
			}
			r.chunkLeft = int(h.chunk)
			r.msgLeft -= uint64(h.chunk)
		}
		k := copy(b[n:], r.mem[r.chunkOff:r.chunkOff+r.chunkLeft])
		r.chunkOff += k
		r.chunkLeft -= k
		n += k
		if r.chunkLeft == 0 && r.msgLeft == 0 {
			p.release()
		}
	}
	return n, nil
}

// failRecv is the error a receive claimed by DeliverFrom fails with when
// the ring fails in the middle of its message.
func (p *peer) failRecv(err error) error {
	if errors.Is(err, transport.ErrClosed) {
		return transport.ErrClosed
	}
	return p.recvErr(err)
}

func (p *peer) recvErr(err error) error {
	switch err {
	case errLeft:
		err = transport.ErrPeerClosed
	case errRevoked:
		err = fmt.Errorf("%w: %w", transport.ErrPeerClosed, errRevoked)
	}
	return &transport.PeerError{Op: "recv", Peer: p.rank, Err: err}
}

// end records why draining p stopped: pending and later receives from p
// fail, so do sends to it, and a loss that is not a goodbye is reported.
func (p *peer) end(err error) {
	if p.e.closing.Load() {
		return // Close aborts the matcher
	}
	left := err == errLeft || err == errRevoked // a revoke comes only from a sender that gives up
	if left {
		p.left.Store(true)
	}
	if errors.Is(err, transport.ErrProtocol) {
		// Tell the peer we stopped reading, so its sends fail.
		p.in.readerGone.Store(1)
		kick(p.in.spaceSeq)
	}
	p.lost.Store(true)
	kick(p.out.spaceSeq) // a sender waiting for space sees linkErr
	p.e.wakeBoards()     // their Lost says so now
	pe := p.recvErr(err).(*transport.PeerError)
	p.e.m.FailPeer(p.rank, pe)
	if f := p.e.onLoss.Load(); f != nil && !left {
		(*f)(pe)
	}
}

// monitor watches the peers' processes: a pidfd becomes readable when its
// process exits. Then the peer's drainer is woken; it delivers what the
// peer published and fails the rest.
func (e *Endpoint) monitor() {
	defer e.wg.Done()
	fds := []unix.PollFd{{Fd: int32(e.wakeR), Events: unix.POLLIN}}
	var who []*peer
	timeout := -1
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		if p.pidfd < 0 {
			timeout = 100 // no pidfd: poll the pid instead
		}
		fds = append(fds, unix.PollFd{Fd: int32(p.pidfd), Events: unix.POLLIN})
		who = append(who, p)
	}
	for {
		_, err := unix.Poll(fds, timeout)
		if e.closing.Load() {
			return
		}
		if err != nil && err != unix.EINTR {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for i, p := range who {
			f := &fds[i+1]
			died := false
			if p.pidfd >= 0 {
				died = f.Fd >= 0 && f.Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) != 0
			} else if !p.dead.Load() {
				died = unix.Kill(p.pid, 0) == unix.ESRCH
			}
			if died {
				f.Fd = -1 // poll ignores it from now on
				p.dead.Store(true)
				kick(p.in.dataSeq)
				p.wakeDrainer() // asleep while callers help
				kick(p.out.spaceSeq)
				e.wakeBoards()
			}
		}
	}
}

// Close implements transport.Endpoint. It tells every peer that this rank
// leaves on purpose (so that it is not taken for dead), fails pending
// requests with ErrClosed, stops its goroutines and unmaps its segments.
func (e *Endpoint) Close() error {
	e.once.Do(func() {
		e.closing.Store(true)
		close(e.done)
		e.closeBoards()
		for _, p := range e.peers {
			if p == nil {
				continue
			}
			p.mu.Lock() // an inline write in Isend is over after this
			p.mu.Unlock()
			kick(p.in.dataSeq)
			p.wakeDrainer()
			kick(p.out.spaceSeq)
		}
		if e.wakeW >= 0 {
			unix.Write(e.wakeW, []byte{0})
		}
		e.wg.Wait()
		for _, p := range e.peers {
			if p != nil { // a helper (helpStep) is out of the ring after this
				p.drainMu.Lock()
				p.drainMu.Unlock()
			}
		}
		for _, p := range e.peers {
			if p == nil {
				continue
			}
			p.out.writerGone.Store(1)
			kick(p.out.dataSeq)
			p.in.readerGone.Store(1)
			kick(p.in.spaceSeq)
			p.mu.Lock()
			p.failQueueLocked()
			p.mu.Unlock()
		}
		e.m.Abort(transport.ErrClosed)
		for _, p := range e.peers {
			if p != nil {
				unix.Unlink(p.name) // in case the peer never mapped it
			}
		}
		e.release()
	})
	return nil
}

// release unmaps the segments and closes the descriptors. The caller has
// stopped the goroutines.
func (e *Endpoint) release() {
	for _, p := range e.peers {
		if p == nil {
			continue
		}
		if p.out != nil {
			unix.Munmap(p.out.mem)
			p.out = nil
		}
		if p.in != nil {
			unix.Munmap(p.in.mem)
			p.in = nil
		}
		if p.pidfd >= 0 {
			unix.Close(p.pidfd)
			p.pidfd = -1
		}
	}
	for _, fd := range []int{e.wakeR, e.wakeW} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	e.wakeR, e.wakeW = -1, -1
}
