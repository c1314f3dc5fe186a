package wire

import (
	"encoding/binary"
	"fmt"
)

// NoticeLen is the length of an abort notice.
const NoticeLen = 16 + 2*FPLen

// Class is the kind of failure an abort notice reports.
type Class byte

// The classes.
const (
	ClassAborted Class = iota
	ClassTimeout
	ClassPeerClosed
	ClassProtocol
	ClassMismatch
	// ClassLeft is no failure: the sender closed its communicator on
	// purpose after Notice.Calls world calls.
	ClassLeft
	// ClassCancelled: the sender's caller cancelled a call in flight; the
	// culprit is the sender itself.
	ClassCancelled
)

var classNames = [...]string{"aborted", "timeout", "peer closed", "protocol", "mismatch", "left", "cancelled"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("Class(%d)", byte(c))
}

// Notice is what a rank that gives up tells its peers: whom it blames
// (a world rank, -1 for no one) and for what; for a mismatch, the rank
// that saw it (Witness) and both calls (the witness's, then the
// culprit's); for a leave, how many world calls it made.
type Notice struct {
	Culprit int
	Class   Class
	Witness int
	FPs     [2]Fingerprint // for ClassMismatch: the witness's call, the culprit's
	Calls   uint64         // for ClassLeft
}

// Encode writes n into b, which holds NoticeLen bytes.
func (n *Notice) Encode(b []byte) {
	_ = b[NoticeLen-1]
	clear(b[:NoticeLen])
	binary.LittleEndian.PutUint64(b, uint64(int64(n.Culprit)))
	b[8] = byte(n.Class)
	switch n.Class {
	case ClassLeft:
		binary.LittleEndian.PutUint64(b[16:], n.Calls)
	case ClassMismatch:
		binary.LittleEndian.PutUint32(b[12:], uint32(int32(n.Witness)))
		copy(b[16:], n.FPs[0][:])
		copy(b[16+FPLen:], n.FPs[1][:])
	}
}

// Bytes returns n encoded.
func (n *Notice) Bytes() []byte {
	b := make([]byte, NoticeLen)
	n.Encode(b)
	return b
}

// ParseNotice reads a notice from b. It fails only for a short b: every
// value of the fields is a notice, and the reader decides what to make of
// a culprit or witness out of range.
func ParseNotice(b []byte) (Notice, error) {
	if len(b) < NoticeLen {
		return Notice{}, fmt.Errorf("wire: notice of %d bytes, want %d", len(b), NoticeLen)
	}
	n := Notice{Culprit: int(int64(binary.LittleEndian.Uint64(b))), Class: Class(b[8])}
	switch n.Class {
	case ClassLeft:
		n.Calls = binary.LittleEndian.Uint64(b[16:])
	case ClassMismatch:
		n.Witness = int(int32(binary.LittleEndian.Uint32(b[12:])))
		copy(n.FPs[0][:], b[16:])
		copy(n.FPs[1][:], b[16+FPLen:])
	}
	return n, nil
}

func (n Notice) String() string {
	switch n.Class {
	case ClassLeft:
		return fmt.Sprintf("left after %d calls", n.Calls)
	case ClassMismatch:
		return fmt.Sprintf("mismatch: rank %d called %v, rank %d called %v", n.Witness, n.FPs[0], n.Culprit, n.FPs[1])
	}
	return fmt.Sprintf("%v, blaming rank %d", n.Class, n.Culprit)
}

// WaitNoticeLen is the length of a wait notice.
const WaitNoticeLen = 8

// EncodeWait writes the wait notice "I wait on world rank on" into b.
func EncodeWait(b []byte, on int) { binary.LittleEndian.PutUint64(b, uint64(int64(on))) }

// ParseWait returns the world rank a wait notice says its sender waits on.
func ParseWait(b []byte) int { return int(int64(binary.LittleEndian.Uint64(b))) }
