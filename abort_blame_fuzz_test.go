package goccl

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
)

// FuzzNotices feeds arbitrary bytes, as peers' messages, to the two
// decoders of abort_blame.go: an abort notice (heard) and the wait notices of a
// stall (blameStall). Rank 0 of a 4-rank world over transport/mem is a
// communicator; ranks 1 to 3 are bare endpoints that send the bytes. It
// must never panic, and:
//
//   - abort: a notice of the wrong length is ignored; one of the right
//     length aborts rank 0 with an error that wraps ErrAborted and the
//     class it names (ErrAborted for an unknown class), names the culprit
//     it names (the sender when it names no rank, the sender when it names
//     rank 0), and is passed on to the other ranks as it came;
//   - waits: the rank blamed is the end of the chain of waits from the
//     direct peer, counting only notices of 8 bytes naming a rank, or the
//     direct peer when the chain loops (abort_blame.go's doc comment); the error
//     still wraps ErrTimeout, and no time is spent waiting, since every
//     peer's notice is there.
func FuzzNotices(f *testing.F) {
	f.Fuzz(func(t *testing.T, abort, waits []byte, direct uint8) {
		if len(abort) > 4*noticeLen || len(waits) > 64 {
			return // longer inputs are only ignored as the wrong length
		}
		fuzzAbortNotice(t, abort)
		fuzzWaitNotices(t, waits, direct)
	})
}

const fuzzRanks = 4

// fuzzWorld returns rank 0's communicator and the bare endpoints of the
// other ranks, all closed when the test ends.
func fuzzWorld(t *testing.T, timeout time.Duration) (*Comm, []transport.Endpoint) {
	eps := mem.New(fuzzRanks)
	c, err := New(eps[0], WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for _, ep := range eps[1:] {
			ep.Close()
		}
	})
	return c, eps
}

func fuzzAbortNotice(t *testing.T, b []byte) {
	const from = 1
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, eps := fuzzWorld(t, time.Second)
	if err := eps[from].Isend(0, tagAbortNotice, b).Wait(ctx); err != nil {
		t.Fatalf("send: %v", err)
	}
	select {
	case <-c.shared.notices.Get(from).Req.Done():
	case <-ctx.Done():
		t.Fatal("the notice receive did not complete")
	}
	adopted := c.heard(from) // again, if the listener was first: heard allows that
	if len(b) != noticeLen {
		if adopted || c.usable("barrier") != nil {
			t.Fatalf("a notice of %d bytes, not %d, was taken: %v", len(b), noticeLen, c.usable("barrier"))
		}
		return
	}
	if !adopted {
		t.Fatal("a notice of the right length was not taken")
	}

	if wire.Class(b[8]) == classLeft {
		// A leave message: the peer closed on purpose after some calls;
		// no abort until a call of this rank needs it.
		if err := c.usable("barrier"); err != nil {
			t.Fatalf("a leave message aborted the communicator: %v", err)
		}
		return
	}
	culprit := int(int64(binary.LittleEndian.Uint64(b)))
	if culprit < 0 || culprit >= fuzzRanks {
		culprit = from
	}
	named := culprit
	if wire.Class(b[8]) == classMismatch && culprit == 0 {
		// A mismatch that blames this rank names the rank whose call
		// differs: the witness, when it is another rank (abort_verdict.go).
		if w := int(int32(binary.LittleEndian.Uint32(b[12:]))); w > 0 && w < fuzzRanks {
			named = w
		}
	}
	if named == 0 {
		named = from
	}
	class, want := wire.Class(b[8]), map[wire.Class]error{classTimeout: ErrTimeout, classPeerClosed: ErrPeerClosed,
		classProtocol: ErrProtocol, classMismatch: ErrMismatch}[wire.Class(b[8])]
	if want == nil {
		want = ErrAborted
		if class != classCancelled {
			class = classAborted // an unknown class is a plain abort
		}
	}
	err := c.usable("barrier")
	var ge *Error
	var rep *PeerReport
	switch {
	case !errors.Is(err, ErrAborted) || !errors.Is(err, want):
		t.Fatalf("got %v, want ErrAborted and %v", err, want)
	case !errors.As(err, &ge) || ge.Peer != named:
		t.Fatalf("got %v, want an *Error naming peer %d", err, named)
	case !errors.As(err, &rep) || rep.From != from || rep.Culprit != culprit:
		t.Fatalf("got %v, want a PeerReport from %d blaming %d", err, from, culprit)
	case class == classCancelled && !strings.Contains(err.Error(), "cancelled"):
		t.Fatalf("message %q does not say the rank cancelled", err)
	case class != classCancelled && !strings.Contains(err.Error(), "rank 1 aborted"):
		t.Fatalf("message %q does not say who aborted", err)
	}

	// Passed on to rank 2 as it came: culprit, class, and a mismatch's
	// fingerprints.
	c.Close() // waits until the notices have left
	got := make([]byte, noticeLen)
	if err := eps[2].Irecv(0, tagAbortNotice, got).Wait(ctx); err != nil {
		t.Fatalf("rank 2 got no notice passed on: %v", err)
	}
	wantFP := make([]byte, 2*fpLen)
	if class == classMismatch {
		wantFP = b[16:]
	}
	if c := int(int64(binary.LittleEndian.Uint64(got))); c != culprit || wire.Class(got[8]) != class || !bytes.Equal(got[16:], wantFP) {
		t.Fatalf("passed on % x\nfor % x: want culprit %d, class %d", got, b, culprit, class)
	}
}

func fuzzWaitNotices(t *testing.T, waits []byte, d uint8) {
	// A long timeout makes the grace period (abort_blame.go, stallGrace) a
	// second, which a decoder that waited for nothing could not hide.
	const timeout = 10 * time.Second
	c, eps := fuzzWorld(t, timeout)
	direct := 1 + int(d)%(fuzzRanks-1)
	waitsOn := map[int]int{0: direct}
	// Rank q sends the q-th 8 bytes; the last rank sends the rest, so that
	// notices can be short, empty or long.
	for q := 1; q < fuzzRanks; q++ {
		lo, hi := min(8*(q-1), len(waits)), min(8*q, len(waits))
		if q == fuzzRanks-1 {
			hi = len(waits)
		}
		msg := waits[lo:hi]
		if err := eps[q].Isend(0, tagWaitNotice, msg).Wait(context.Background()); err != nil {
			t.Fatalf("send: %v", err)
		}
		if len(msg) == 8 {
			if w := int(int64(binary.LittleEndian.Uint64(msg))); w >= 0 && w < fuzzRanks {
				waitsOn[q] = w
			}
		}
	}
	// The dumb reference: follow the waits from the direct peer.
	want := direct
	for cur, seen := direct, map[int]bool{0: true}; !seen[cur]; {
		seen[cur] = true
		next, ok := waitsOn[cur]
		if !ok {
			want = cur
			break
		}
		cur = next
	}
	ge := &Error{Op: "all_reduce", Rank: 0, Peer: direct, Dir: "<-", Err: ErrTimeout}
	start := time.Now()
	got := c.blameStall(ge)
	took := time.Since(start)
	switch {
	case got.Peer != want:
		t.Fatalf("waits %v (direct %d): blamed %d, want %d: %v", waitsOn, direct, got.Peer, want, got)
	case !errors.Is(got, ErrTimeout):
		t.Fatalf("%v does not wrap ErrTimeout", got)
	case took > stallGrace(timeout)/2:
		t.Fatalf("took %v although every notice had arrived", took)
	}
}
