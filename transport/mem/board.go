package mem

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goccl/goccl/transport"
)

var _ transport.Boarder = (*endpoint)(nil)

// boards are a mesh's shared blocks, by group id and members.
type boards struct {
	mu sync.Mutex
	m  map[string]*board
}

// board is one group's block. Its members are goroutines of this process,
// so the block is ordinary memory; parked members sleep on a channel that
// Wake closes and replaces.
type board struct {
	mesh  *mesh
	key   string
	ranks []int
	mem   []byte
	refs  int // members holding it; mesh.boards.mu

	sleepers atomic.Int32
	mu       sync.Mutex
	wake     chan struct{} // closed by Wake; mu
}

// memberBoard is one member's hold on a board.
type memberBoard struct {
	*board
	ep     *endpoint
	closed atomic.Bool
}

// Board implements transport.Boarder. A mesh with a fault plan has no
// boards: faults act on messages, and a board would bypass them.
func (e *endpoint) Board(id uint64, ranks []int, size int) (transport.Board, error) {
	m := e.mesh
	if len(m.cfg.Faults) > 0 {
		return nil, fmt.Errorf("mem: %w: a fault plan is set", transport.ErrNoBoard)
	}
	if !slices.Contains(ranks, e.rank) {
		return nil, fmt.Errorf("mem: board of %v asked by rank %d, not a member", ranks, e.rank)
	}
	for _, r := range ranks {
		if err := transport.CheckPeer("board", r, len(m.eps)); err != nil {
			return nil, err
		}
	}
	key := fmt.Sprint(id, ranks, size)
	m.boards.mu.Lock()
	defer m.boards.mu.Unlock()
	if m.boards.m == nil {
		m.boards.m = make(map[string]*board)
	}
	b := m.boards.m[key]
	if b == nil {
		b = &board{mesh: m, key: key, ranks: slices.Clone(ranks), wake: make(chan struct{}), mem: aligned(size)}
		m.boards.m[key] = b
	}
	b.refs++
	return &memberBoard{board: b, ep: e}, nil
}

func (b *memberBoard) Bytes() []byte { return b.mem }

// Wait implements transport.Board: spin (transport.Spinner, as receives
// do), then park on the wake channel.
func (b *memberBoard) Wait(ctx context.Context, ready func() bool) error {
	if s := b.ep.spin; s != nil {
		if s.Wait(ready) {
			return nil
		}
	} else if ready() {
		return nil
	}
	for {
		// Say so before the last look: a member that writes after it
		// sees the sleeper and wakes it; one that wrote before is seen.
		b.sleepers.Add(1)
		b.mu.Lock()
		ch := b.wake
		b.mu.Unlock()
		if ready() {
			b.sleepers.Add(-1)
			return nil
		}
		if b.ep.isClosed() {
			b.sleepers.Add(-1)
			return fmt.Errorf("mem: board: %w", transport.ErrClosed)
		}
		select {
		case <-ch:
			b.sleepers.Add(-1)
		case <-ctx.Done():
			b.sleepers.Add(-1)
			if ready() {
				return nil
			}
			return ctx.Err()
		}
		if ready() {
			return nil
		}
	}
}

func (b *board) Wake() {
	if b.sleepers.Load() == 0 {
		return
	}
	b.wakeAll()
}

func (b *board) wakeAll() {
	b.mu.Lock()
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

func (b *board) Lost(m int) error {
	if m < 0 || m >= len(b.ranks) {
		return &transport.PeerError{Op: "board", Peer: m, Err: fmt.Errorf("member out of range [0,%d)", len(b.ranks))}
	}
	if r := b.ranks[m]; b.mesh.eps[r].isClosed() {
		return &transport.PeerError{Op: "recv", Peer: r, Err: transport.ErrPeerClosed}
	}
	return nil
}

func (b *memberBoard) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	bs := &b.mesh.boards
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b.refs--; b.refs == 0 {
		delete(bs.m, b.key)
	}
	return nil
}

// wakeBoards wakes every board rank is a member of: it has closed, and
// whoever waits on it must look.
func (m *mesh) wakeBoards(rank int) {
	m.boards.mu.Lock()
	defer m.boards.mu.Unlock()
	for _, b := range m.boards.m {
		if slices.Contains(b.ranks, rank) {
			b.wakeAll()
		}
	}
}

// aligned returns size zeroed bytes that start on a 64-byte boundary, so
// that the words members poll sit in cache lines of their own as the
// layout means them to.
func aligned(size int) []byte {
	words := make([]uint64, (size+127)/8) // 8-byte aligned, 64 bytes spare
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	return b[off : off+size : off+size]
}
