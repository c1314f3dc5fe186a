package board

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// block is a board's memory shared by fake members, with the news of
// lost members under the test's control.
type block struct {
	mem  []byte
	lost []atomic.Bool
}

// fake is one member's transport.Board over a block: Wait polls ready,
// sleeping a little between polls, until ctx ends or the member is
// closed.
type fake struct {
	*block
	closed atomic.Bool
	wakes  atomic.Int64
}

func (f *fake) Bytes() []byte { return f.mem }
func (f *fake) Wake()         { f.wakes.Add(1) }
func (f *fake) Close() error  { f.closed.Store(true); return nil }

func (f *fake) Wait(ctx context.Context, ready func() bool) error {
	for {
		if ready() {
			return nil
		}
		if f.closed.Load() {
			return fmt.Errorf("fake: board: %w", transport.ErrClosed)
		}
		select {
		case <-ctx.Done():
			if ready() {
				return nil
			}
			return ctx.Err()
		case <-time.After(20 * time.Microsecond):
		}
	}
}

func (f *fake) Lost(m int) error {
	if f.lost[m].Load() {
		return &transport.PeerError{Op: "recv", Peer: m, Err: transport.ErrPeerClosed}
	}
	return nil
}

// aligned returns size zeroed bytes on a 64-byte boundary.
func aligned(size int) []byte {
	words := make([]uint64, (size+2*Line)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & (Line - 1))
	return b[off : off+size : off+size]
}

// fakeMembers returns n members of one board over a fake block, and
// their transport boards.
func fakeMembers(t testing.TB, n, polls int) ([]*Board, []*fake) {
	t.Helper()
	blk := &block{mem: aligned(Size(n)), lost: make([]atomic.Bool, n)}
	bs := make([]*Board, n)
	fs := make([]*fake, n)
	for m := range n {
		fs[m] = &fake{block: blk}
		b, err := New(fs[m], n, m, polls)
		if err != nil {
			t.Fatal(err)
		}
		bs[m] = b
	}
	return bs, fs
}

// memMembers returns n members of one board over transport/mem, the
// board of the mesh's endpoints, and the endpoints.
func memMembers(t testing.TB, n int) ([]*Board, []transport.Endpoint) {
	t.Helper()
	eps := mem.New(n)
	ranks := make([]int, n)
	for r := range ranks {
		ranks[r] = r
	}
	bs := make([]*Board, n)
	for r, ep := range eps {
		tb, err := ep.(transport.Boarder).Board(7, ranks, Size(n))
		if err != nil {
			t.Fatal(err)
		}
		if bs[r], err = New(tb, n, r, Polls); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for r, ep := range eps {
			bs[r].Close()
			ep.Close()
		}
	})
	return bs, eps
}

// fp is a fingerprint for call seq, its first byte tag (what differs
// between calls that do not match).
func fp(seq uint64, tag byte) *[FPLen]byte {
	var f [FPLen]byte
	f[0] = tag
	binary.LittleEndian.PutUint64(f[24:], seq)
	return &f
}

// rows gives the calls of one member their Prev: its last call in the
// same row.
type rows [2]uint64

func (r *rows) call(seq uint64, tag byte) *Call {
	c := &Call{Seq: seq, Prev: r[seq&1], FP: fp(seq, tag), Check: true}
	r[seq&1] = seq
	return c
}

// hooks records a call's waits.
type hooks struct {
	mu      sync.Mutex
	waits   []int
	waiting chan int // if not nil, told of each wait
	aborted atomic.Bool
}

func (h *hooks) Waiting(q int) {
	h.mu.Lock()
	h.waits = append(h.waits, q)
	h.mu.Unlock()
	if h.waiting != nil {
		h.waiting <- q
	}
}

func (h *hooks) Aborted() bool { return h.aborted.Load() }

func (h *hooks) seen() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.waits...)
}

// fold is a reduction whose result depends on the order of its operands
// (dst = dst*31 + src, 8-byte words): members that reduced in another
// order would hold other bits.
func fold(dst, src []byte) error {
	if len(dst) != len(src) || len(dst)%8 != 0 {
		return fmt.Errorf("fold: %d and %d bytes", len(dst), len(src))
	}
	for i := 0; i < len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], binary.LittleEndian.Uint64(dst[i:])*31+binary.LittleEndian.Uint64(src[i:]))
	}
	return nil
}

// contribution is member m's payload of words words in call seq.
func contribution(m int, seq uint64, words int) []byte {
	b := make([]byte, 8*words)
	for i := range words {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(m+1)<<32|seq<<8|uint64(i))
	}
	return b
}

// want is the allreduce of call seq over n members in member order.
func want(n int, seq uint64, words int) []byte {
	acc := contribution(0, seq, words)
	for m := 1; m < n; m++ {
		fold(acc, contribution(m, seq, words))
	}
	return acc
}
