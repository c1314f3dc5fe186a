//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goccl/goccl/transport"
)

func word(b []byte, i int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[8*i])) }

// TestBoardWakeups: two members take turns for many rounds with no spin,
// so that every wait that does not find its word parks on the futex. The
// safety net of a FUTEX_WAIT is made longer than the test's deadline:
// a lost wake-up hangs a round, the deadline ends it, and the test fails.
func TestBoardWakeups(t *testing.T) {
	old := boardPark
	boardPark = time.Hour
	t.Cleanup(func() { boardPark = old })
	for _, spin := range []time.Duration{-1, DefaultSpin} {
		t.Run(spin.String(), func(t *testing.T) {
			eps := pair(t, Config{Spin: spin})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			const rounds = 10000
			var wg sync.WaitGroup
			errs := make([]error, 2)
			var parked, parks atomic.Int64
			for me := range 2 {
				wg.Go(func() {
					b, err := eps[me].Board(5, []int{0, 1}, 128)
					if err != nil {
						errs[me] = err
						return
					}
					defer func() { parks.Add(b.(*boardHandle).parks.Load()); b.Close() }()
					mem := b.Bytes()
					mine, theirs := word(mem, 8*me), word(mem, 8*(1-me)) // a line each
					for i := uint64(1); i <= rounds; i++ {
						mine.Store(i)
						b.Wake()
						if theirs.Load() < i {
							parked.Add(1)
						}
						if err := b.Wait(ctx, func() bool { return theirs.Load() >= i }); err != nil {
							errs[me] = err
							return
						}
						// Both wrote round i: the next store may overtake
						// the peer's read only by one round.
						if got := theirs.Load(); got != i && got != i+1 {
							errs[me] = errors.New("peer ran ahead")
							return
						}
					}
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("member %d: %v", i, err)
				}
			}
			t.Logf("%d of %d waits did not find their word at once, %d FUTEX_WAITs", parked.Load(), 2*rounds, parks.Load())
			if spin < 0 && parks.Load() == 0 {
				t.Fatal("no wait parked: the test did not exercise the futex")
			}
		})
	}
}

// TestBoardCloseWakes: a member parked in Wait returns ErrClosed when its
// endpoint closes, and Lost names the member whose endpoint closed.
func TestBoardCloseWakes(t *testing.T) {
	old := boardPark
	boardPark = time.Hour
	t.Cleanup(func() { boardPark = old })
	eps := pair(t, Config{Spin: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b0, err := eps[0].Board(1, []int{0, 1}, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b0.Close()
	b1, err := eps[1].Board(1, []int{0, 1}, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	done := make(chan error, 1)
	go func() { done <- b0.Wait(ctx, func() bool { return false }) }()
	for b0.(*boardHandle).sleepers.Load() == 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond) // until it parks
	}
	eps[0].Close()
	if err := <-done; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
	// Member 1 hears of member 0's goodbye: Lost and a woken Wait.
	err = b1.Wait(ctx, func() bool { return b1.Lost(0) != nil })
	var pe *transport.PeerError
	if err != nil || !errors.As(b1.Lost(0), &pe) || pe.Peer != 0 || !errors.Is(pe, transport.ErrPeerClosed) {
		t.Fatalf("Wait %v, Lost(0) %v", err, b1.Lost(0))
	}
	if b1.Lost(1) != nil {
		t.Fatalf("Lost(self) = %v", b1.Lost(1))
	}
	if b1.Lost(2) == nil || b1.Lost(-1) == nil {
		t.Fatal("Lost of a member out of range is nil")
	}
}

// TestBoardCtx: a parked Wait returns ctx's error when ctx ends.
func TestBoardCtx(t *testing.T) {
	old := boardPark
	boardPark = time.Hour
	t.Cleanup(func() { boardPark = old })
	eps := pair(t, Config{Spin: -1})
	b, err := eps[0].Board(1, []int{0, 1}, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Wait(ctx, func() bool { return false }) }()
	for b.(*boardHandle).sleepers.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait: %v", err)
	}
}

// TestBoardBadSegment: a file in the board's place that is not the
// group's (another size, a bad header, open to others) is refused, and
// Board gives up on one whose creator never finishes it.
func TestBoardBadSegment(t *testing.T) {
	eps := pair(t, Config{})
	ranks := []int{0, 1}
	const size = 64
	name := filepath.Join(DefaultDir, BoardName(eps[0].cfg.JobID, eps[0].cfg.Nonce, 3, ranks, size))
	key := boardKey(3, ranks, size)
	good := func() []byte {
		b := make([]byte, boardHdr+size)
		binary.LittleEndian.PutUint64(b[bOffMagic:], boardMagic)
		binary.LittleEndian.PutUint32(b[bOffVersion:], boardVersion)
		binary.LittleEndian.PutUint32(b[bOffMembers:], 2)
		binary.LittleEndian.PutUint64(b[bOffSize:], size)
		binary.LittleEndian.PutUint64(b[bOffKey:], key)
		binary.LittleEndian.PutUint32(b[bOffReady:], 1)
		return b
	}
	if err := checkBoardHeader(good(), boardHdr+size, key, 2); err != nil {
		t.Fatalf("good header refused: %v", err)
	}
	for what, c := range map[string]struct {
		bytes []byte
		mode  os.FileMode
	}{
		"members":   {func() []byte { b := good(); b[bOffMembers] = 3; return b }(), 0o600},
		"key":       {func() []byte { b := good(); b[bOffKey] ^= 1; return b }(), 0o600},
		"block":     {func() []byte { b := good(); b[bOffSize] = 128; return b }(), 0o600},
		"magic":     {func() []byte { b := good(); b[bOffMagic] = 0; return b }(), 0o600},
		"file size": {append(good(), make([]byte, 64)...), 0o600},
		"mode":      {good(), 0o644},
	} {
		if err := os.WriteFile(name, c.bytes, c.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(name, c.mode)
		if b, err := eps[1].Board(3, ranks, size); err == nil {
			b.Close()
			t.Errorf("%s: a bad segment was mapped", what)
		}
		os.Remove(name)
	}
}
