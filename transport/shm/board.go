//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/transport"
)

var _ transport.Boarder = (*Endpoint)(nil)

// Board segment layout: a header of four 64-byte lines, then the block.
// See doc.go.
const (
	boardMagic   = 0x6f6263636c627264 // "gocclbrd" (little endian "drblccbo")
	boardVersion = 1
	boardHdr     = 4 * 64 // the block starts on the fifth line

	bOffMagic   = 0  // uint64
	bOffVersion = 8  // uint32
	bOffMembers = 12 // uint32: members of the group
	bOffSize    = 16 // uint64: bytes of the block
	bOffKey     = 24 // uint64: FNV-1a of the group's id, ranks and size
	bOffCreator = 32 // int32: pid of the member that created it
	bOffReady   = 36 // uint32: stored last by the creator

	bOffMapped   = 1 * 64 // uint32: members that have mapped it
	bOffSeq      = 2 * 64 // uint32: futex word waiters park on
	bOffSleepers = 3 * 64 // uint32: members parked or about to park

	// boardMaxSize bounds a block: boards carry small collectives.
	boardMaxSize = 1 << 30
)

// boardPark bounds one FUTEX_WAIT of a board's Wait: a safety net only
// (tests make it long, so that a lost wake-up shows as a hang).
var boardPark = parkLimit

// BoardTimeout bounds Board: how long a member waits for the member that
// created the group's segment to finish it (microseconds, unless that
// process stalls or died mid-way). Board then fails, and the caller does
// without a board.
const BoardTimeout = 5 * time.Second

// BoardName is the file name of the segment of the board of group id,
// whose members are the endpoint ranks ranks, of size bytes.
func BoardName(job, nonce string, id uint64, ranks []int, size int) string {
	return fmt.Sprintf("goccl-%s-%s-b%x-%x", job, nonce, id, boardKey(id, ranks, size))
}

// boardKey hashes what every member must agree on, so that the name is
// short whatever the group's size and a member that asks with other ranks
// or another size is found out by the header.
func boardKey(id uint64, ranks []int, size int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	put(id)
	put(uint64(size))
	put(uint64(len(ranks)))
	for _, r := range ranks {
		put(uint64(r))
	}
	return h.Sum64()
}

// boards are an endpoint's mapped boards, by name.
type boards struct {
	making sync.Mutex // held by Board while it maps
	mu     sync.Mutex
	m      map[string]*segBoard
}

// segBoard is one mapping of a board segment, shared by this endpoint's
// handles on it.
type segBoard struct {
	e        *Endpoint
	name     string
	ino      uint64
	ranks    []int // endpoint ranks of the members, in group order
	mem      []byte
	block    []byte
	mapped   *atomic.Uint32
	seq      *atomic.Uint32
	sleepers *atomic.Uint32
	parks    atomic.Int64 // FUTEX_WAITs (tests)
	refs     int          // handles; e.boards.mu
	unlinked bool         // the file is gone (or ours to leave alone); e.boards.mu
}

// boardHandle is one holder's view of a board.
type boardHandle struct {
	*segBoard
	closed atomic.Bool
}

// Board implements transport.Boarder: the block lives in a segment that
// every member maps. Whichever member comes first creates it (O_EXCL, mode
// 0600, in Config.Dir); the others wait (with backoff, at most
// BoardTimeout) until it is ready, check it, and map it. No member waits
// for another to reach Board, so members may ask in any order and at any
// time. The member that maps it last unlinks the file.
func (e *Endpoint) Board(id uint64, ranks []int, size int) (transport.Board, error) {
	if size < 0 || size > boardMaxSize {
		return nil, fmt.Errorf("shm: board of %d bytes", size)
	}
	if len(ranks) < 1 || len(ranks) > e.cfg.Size {
		return nil, fmt.Errorf("shm: board of %d members on an endpoint of %d ranks", len(ranks), e.cfg.Size)
	}
	seen := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		if err := transport.CheckPeer("board", r, e.cfg.Size); err != nil {
			return nil, err
		}
		if seen[r] {
			return nil, fmt.Errorf("shm: board lists rank %d twice", r)
		}
		seen[r] = true
	}
	if !seen[e.cfg.Rank] {
		return nil, fmt.Errorf("shm: board of %v asked by rank %d, not a member", ranks, e.cfg.Rank)
	}
	name := filepath.Join(e.cfg.Dir, BoardName(e.cfg.JobID, e.cfg.Nonce, id, ranks, size))
	// One Board call at a time maps; the map's lock is not held meanwhile,
	// so that a loss or Close can wake the boards already mapped.
	e.boards.making.Lock()
	defer e.boards.making.Unlock()
	bs := &e.boards
	bs.mu.Lock()
	b := bs.m[name]
	if b != nil {
		b.refs++
	}
	bs.mu.Unlock()
	if b != nil {
		return &boardHandle{segBoard: b}, nil
	}
	if e.closing.Load() {
		return nil, fmt.Errorf("shm: board: %w", transport.ErrClosed)
	}
	b, err := e.mapBoard(name, boardKey(id, ranks, size), ranks, size)
	if err != nil {
		return nil, err
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if e.closing.Load() {
		// Close ran closeBoards before this board was in the map.
		b.leave()
		unix.Munmap(b.mem)
		return nil, fmt.Errorf("shm: board: %w", transport.ErrClosed)
	}
	if bs.m == nil {
		bs.m = make(map[string]*segBoard)
	}
	bs.m[name] = b
	return &boardHandle{segBoard: b}, nil
}

// mapBoard creates or opens the segment name and maps it.
func (e *Endpoint) mapBoard(name string, key uint64, ranks []int, size int) (*segBoard, error) {
	want := boardHdr + size
	deadline := time.Now().Add(BoardTimeout)
	backoff := 20 * time.Microsecond
	var mem []byte
	var ino uint64
	for {
		var err error
		mem, ino, err = createBoard(name, want, key, len(ranks))
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) {
			return nil, err
		}
		mem, ino, err = openBoard(name, want, key, len(ranks))
		if err == nil {
			break
		}
		if !errors.Is(err, errNotYet) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("shm: board %s not ready after %v", name, BoardTimeout)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 10*time.Millisecond)
	}
	b := &segBoard{
		e: e, name: name, ino: ino, ranks: slices.Clone(ranks), mem: mem, refs: 1,
		block:  mem[boardHdr:want:want],
		mapped: u32(mem, bOffMapped), seq: u32(mem, bOffSeq), sleepers: u32(mem, bOffSleepers),
	}
	if b.mapped.Add(1) == uint32(len(ranks)) {
		// Everyone has it: nothing is left in Dir from here on.
		b.unlink()
	}
	return b, nil
}

// createBoard makes, sizes and maps a board segment, fills its header and
// marks it ready; unix.EEXIST if another member made it first.
func createBoard(name string, size int, key uint64, members int) ([]byte, uint64, error) {
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if err == unix.EEXIST {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("shm: create %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Unlink(name)
		return nil, 0, fmt.Errorf("shm: stat %s: %w", name, err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Unlink(name)
		return nil, 0, fmt.Errorf("shm: size %s: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Unlink(name)
		return nil, 0, fmt.Errorf("shm: map %s: %w", name, err)
	}
	binary.LittleEndian.PutUint64(mem[bOffMagic:], boardMagic)
	binary.LittleEndian.PutUint32(mem[bOffVersion:], boardVersion)
	binary.LittleEndian.PutUint32(mem[bOffMembers:], uint32(members))
	binary.LittleEndian.PutUint64(mem[bOffSize:], uint64(size-boardHdr))
	binary.LittleEndian.PutUint64(mem[bOffKey:], key)
	binary.LittleEndian.PutUint32(mem[bOffCreator:], uint32(os.Getpid()))
	u32(mem, bOffReady).Store(1)
	return mem, st.Ino, nil
}

// openBoard maps a board segment another member created, once it is
// ready, after checking that it is this user's alone and that its size
// and header are the group's.
func openBoard(name string, size int, key uint64, members int) ([]byte, uint64, error) {
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err == unix.ENOENT {
		return nil, 0, errNotYet // unlinked by a member that closed: create it anew
	}
	if err != nil {
		return nil, 0, fmt.Errorf("shm: open %s: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, fmt.Errorf("shm: stat %s: %w", name, err)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		return nil, 0, fmt.Errorf("shm: %s belongs to uid %d with mode %#o: not a segment of this job", name, st.Uid, st.Mode&0o777)
	}
	if st.Size == 0 {
		return nil, 0, errNotYet // the creator has not sized it yet
	}
	if st.Size != int64(size) {
		return nil, 0, fmt.Errorf("%w: board segment %s has %d bytes, want %d", transport.ErrProtocol, name, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, fmt.Errorf("shm: map %s: %w", name, err)
	}
	if u32(mem, bOffReady).Load() == 0 {
		unix.Munmap(mem)
		return nil, 0, errNotYet
	}
	if err := checkBoardHeader(mem, size, key, members); err != nil {
		unix.Munmap(mem)
		return nil, 0, fmt.Errorf("%w: board segment %s: %v", transport.ErrProtocol, name, err)
	}
	return mem, st.Ino, nil
}

// checkBoardHeader checks what a board's creator wrote against what this
// member asked for.
func checkBoardHeader(mem []byte, size int, key uint64, members int) error {
	if len(mem) < boardHdr {
		return fmt.Errorf("%d bytes, less than a header", len(mem))
	}
	if m := binary.LittleEndian.Uint64(mem[bOffMagic:]); m != boardMagic {
		return fmt.Errorf("bad magic %#x", m)
	}
	if v := binary.LittleEndian.Uint32(mem[bOffVersion:]); v != boardVersion {
		return fmt.Errorf("version %d, want %d", v, boardVersion)
	}
	if n := binary.LittleEndian.Uint32(mem[bOffMembers:]); uint64(n) != uint64(members) {
		return fmt.Errorf("%d members, want %d", n, members)
	}
	if s := binary.LittleEndian.Uint64(mem[bOffSize:]); s != uint64(size-boardHdr) || uint64(len(mem)) != uint64(size) {
		return fmt.Errorf("a block of %d bytes in %d, want %d in %d", s, len(mem), size-boardHdr, size)
	}
	if k := binary.LittleEndian.Uint64(mem[bOffKey:]); k != key {
		return fmt.Errorf("group key %#x, want %#x (another group, ranks or size)", k, key)
	}
	return nil
}

// unlink removes the segment's file if it is still the one this board
// maps. The caller holds e.boards.mu or is the only one to see b.
func (b *segBoard) unlink() {
	if b.unlinked {
		return
	}
	b.unlinked = true
	var st unix.Stat_t
	if err := unix.Stat(b.name, &st); err == nil && st.Ino == b.ino {
		unix.Unlink(b.name)
	}
}

// leave unlinks the file if some member has not mapped it yet: nothing
// stays behind in Dir, and a member that comes later makes its own. The
// caller holds e.boards.mu.
func (b *segBoard) leave() {
	if !b.unlinked && b.mapped.Load() != uint32(len(b.ranks)) {
		b.unlink()
	}
	b.unlinked = true
}

func (b *boardHandle) Bytes() []byte { return b.block }

// Wait implements transport.Board: poll ready for the endpoint's spin
// time (transport.Spinner), then park on the segment's futex word as a
// ring's reader does: count itself among the sleepers, read the word,
// look once more, and FUTEX_WAIT with the value read. A member that writes
// and then finds a sleeper bumps the word and wakes; with sequentially
// consistent atomics either it sees the sleeper or the sleeper sees what
// it wrote, and a bump after the read makes FUTEX_WAIT return at once.
// ctx's end, a lost member and this endpoint's Close kick the word too;
// FUTEX_WAIT also times out after parkLimit as a safety net.
func (b *boardHandle) Wait(ctx context.Context, ready func() bool) error {
	if b.e.spin.Wait(ready) {
		return nil
	}
	var stop func() bool
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		if ready() {
			return nil
		}
		if b.e.closing.Load() || b.closed.Load() {
			return fmt.Errorf("shm: board: %w", transport.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if stop == nil && ctx.Done() != nil {
			stop = context.AfterFunc(ctx, b.kick)
		}
		b.sleepers.Add(1)
		v := b.seq.Load()
		if ready() || b.e.closing.Load() || b.closed.Load() || ctx.Err() != nil {
			b.sleepers.Add(^uint32(0))
			continue
		}
		b.parks.Add(1)
		futexWaitFor(b.seq, v, boardPark)
		b.sleepers.Add(^uint32(0))
	}
}

// Wake implements transport.Board: one atomic load while nobody parks.
func (b *segBoard) Wake() {
	if b.sleepers.Load() != 0 {
		b.kick()
	}
}

// kick wakes every member parked on the board, in every process.
func (b *segBoard) kick() { kick(b.seq) }

// Lost implements transport.Board from what the endpoint knows of member
// m's process: exited (the pidfd monitor), closed its endpoint (a
// goodbye), or broke the protocol.
func (b *segBoard) Lost(m int) error {
	if m < 0 || m >= len(b.ranks) {
		return &transport.PeerError{Op: "board", Peer: m, Err: fmt.Errorf("member out of range [0,%d)", len(b.ranks))}
	}
	r := b.ranks[m]
	if r == b.e.cfg.Rank {
		return nil
	}
	if p := b.e.peers[r]; p.dead.Load() || p.left.Load() || p.lost.Load() {
		return &transport.PeerError{Op: "recv", Peer: r, Err: transport.ErrPeerClosed}
	}
	return nil
}

// Close implements transport.Board. The last of this endpoint's handles
// on the board unmaps it (nothing may touch Bytes after that) and unlinks
// the file if some member has not mapped it yet.
func (b *boardHandle) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.kick() // this handle's own waiters, if any, return ErrClosed
	bs := &b.e.boards
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b.refs--; b.refs > 0 {
		return nil
	}
	b.leave()
	delete(bs.m, b.name)
	err := unix.Munmap(b.mem)
	b.mem, b.block = nil, nil
	if err != nil {
		return fmt.Errorf("shm: board: unmap %s: %w", b.name, err)
	}
	return nil
}

// wakeBoards wakes whoever waits on this endpoint's boards: a peer is
// lost, or this endpoint closes.
func (e *Endpoint) wakeBoards() {
	e.boards.mu.Lock()
	defer e.boards.mu.Unlock()
	for _, b := range e.boards.m {
		b.kick()
	}
}

// closeBoards is Close's part: wake the waiters and unlink the files that
// some member has not mapped. The mappings stay until their holders close
// them, since a waiter may still be reading them.
func (e *Endpoint) closeBoards() {
	e.boards.mu.Lock()
	defer e.boards.mu.Unlock()
	for _, b := range e.boards.m {
		b.leave()
		b.kick()
	}
}
