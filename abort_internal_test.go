package goccl

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/internal/wire"
	"github.com/goccl/goccl/reduceop"
)

// The rules failure handling applies, alone: no communicator, no world.

func TestCulprit(t *testing.T) {
	ranks := []int{4, 7, 9} // a group of world ranks 4, 7 and 9
	cancelled := &Error{Op: "all_reduce", Rank: 0, Peer: 1, Err: &cancelError{context.Canceled}}
	for _, tc := range []struct {
		name string
		lost int
		err  error
		want int
	}{
		{"a lost rank comes first", 3, &Error{Peer: 1}, 3},
		{"the peer the error names, in world numbering", -1, &Error{Peer: 1}, 7},
		{"wrapped", -1, fmt.Errorf("ring: %w", &Error{Peer: 2}), 9},
		{"no peer: this rank", -1, &Error{Peer: -1}, 4},
		{"a peer out of the group: this rank", -1, &Error{Peer: 3}, 4},
		{"not an *Error: this rank", -1, errors.New("x"), 4},
		{"a cancel blames the canceller, not the peer it waited on", -1, cancelled, 4},
		{"but a lost rank still comes first", 9, cancelled, 9},
	} {
		if got := culprit(tc.lost, tc.err, ranks, 4); got != tc.want {
			t.Errorf("%s: culprit %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestWhoDiffers(t *testing.T) {
	call := func(dt reduceop.DType) fingerprint {
		return wire.NewFingerprint(wire.Call{Op: commslog.AllReduce, DType: dt, Count: 8, Root: -1, Seq: 5})
	}
	w, cu, other := call(reduceop.Float32), call(reduceop.Int32), call(reduceop.Int64)
	const witness, culp = 1, 2
	for _, tc := range []struct {
		name  string
		me    int
		mine  fingerprint
		known bool
		want  int
	}{
		{"made the witness's call: the culprit differs", 0, w, true, culp},
		{"made the culprit's call: the witness differs", 0, cu, true, witness},
		{"made a third call: the witness's word", 0, other, true, culp},
		{"call unknown: the witness's word", 0, fingerprint{}, false, culp},
		{"named by the witness, call unknown: the witness differs", culp, fingerprint{}, false, witness},
		{"the culprit itself, having made the culprit's call", culp, cu, true, witness},
	} {
		if got := whoDiffers(tc.me, tc.mine, tc.known, witness, culp, w, cu); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want wire.Class
	}{
		{classify(context.DeadlineExceeded), classTimeout},
		{&Error{Err: ErrPeerClosed}, classPeerClosed},
		{fmt.Errorf("x: %w", ErrProtocol), classProtocol},
		{&mismatchError{}, classMismatch},
		{&cancelError{context.Canceled}, classCancelled},
		{&PeerReport{class: classCancelled}, classCancelled},
		{&PeerReport{class: classTimeout}, classTimeout},
		{errors.New("other"), classAborted},
	} {
		if got := classOf(tc.err); got != tc.want {
			t.Errorf("classOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if tc.want != classCancelled && tc.want != classAborted && !errors.Is(tc.err, classError(tc.want)) {
			t.Errorf("%v is not %v", tc.err, classError(tc.want))
		}
	}
}

func TestLeftBefore(t *testing.T) {
	for _, tc := range []struct {
		seq, calls uint64
		want       bool
	}{{5, 4, true}, {4, 4, false}, {1, 9, false}, {1, 0, true}} {
		if got := leftBefore(tc.seq, tc.calls); got != tc.want {
			t.Errorf("call %d, left after %d: %v", tc.seq, tc.calls, got)
		}
	}
}
