package board

import (
	"fmt"

	"github.com/goccl/goccl/transport"
)

// The board's errors name members by their index in the group and carry
// what the caller needs to say what went wrong in its own words; the
// board returns them as they are, unwrapped.

// MismatchError: member Member's call Seq is not this member's. Either its
// slot holds another fingerprint (where Call.Check), or it announced that
// its call Seq does not run on the board (Announced; Theirs may then
// equal Mine: the same call, which the members do not agree to run on
// the board).
type MismatchError struct {
	Member       int
	Seq          uint64
	Mine, Theirs [FPLen]byte
	Announced    bool
}

func (e *MismatchError) Error() string {
	how := "posted"
	if e.Announced {
		how = "announced off the board"
	}
	return fmt.Sprintf("board: call %d: member %d %s fingerprint %x, this member's is %x", e.Seq, e.Member, how, e.Theirs, e.Mine)
}

// LengthError: member Member posted Got bytes for call Seq, where this
// member posted Want.
type LengthError struct {
	Member    int
	Seq       uint64
	Got, Want int
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("board: call %d: member %d posted %d bytes, this member %d", e.Seq, e.Member, e.Got, e.Want)
}

// WaitError: a wait of call Seq ended without what it waited for. Err is
// why: the context's error, the transport's (an error wrapping
// transport.ErrClosed: this member's board is closed; Board.Lost's, a
// *transport.PeerError: Member is gone), or ErrAborted (Hooks.Aborted).
// Member is the member waited on or found lost, -1 where the call waited
// on the acks of several and none was found lost.
type WaitError struct {
	Member int
	Seq    uint64
	Err    error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("board: call %d: waiting on member %d: %v", e.Seq, e.Member, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// ErrAborted ends a wait whose Hooks.Aborted said so. It wraps
// transport.ErrClosed: to the caller, an abort closes the board.
var ErrAborted = fmt.Errorf("board: %w", transport.ErrClosed)
