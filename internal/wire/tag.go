package wire

import (
	"fmt"
	"hash/fnv"

	"github.com/goccl/goccl/transport"
)

// The tag's fields (see the package doc).
const (
	// GroupShift is where the group id starts in a tag.
	GroupShift = 40
	// P2PBit marks a point-to-point message's tag.
	P2PBit = 1 << 39
	// SeqMask keeps a tag's sequence number (or point-to-point tag).
	SeqMask = P2PBit - 1
	// MaxGroup is the largest group id a group is given: all ones is
	// reserved for the notices (and transport/tcp's goodbye).
	MaxGroup = 1<<24 - 2
)

// The reserved tags.
const (
	Reserved = transport.Tag(1<<24-1) << GroupShift
	WaitTag  = Reserved | 1
	AbortTag = Reserved | 2
)

// CollectiveTag is the tag of collective number seq of group.
func CollectiveTag(group, seq uint64) transport.Tag {
	return transport.Tag(group<<GroupShift | seq&SeqMask)
}

// P2PTag is the tag of a point-to-point message of group with the user's
// tag.
func P2PTag(group uint64, tag uint64) transport.Tag {
	return transport.Tag(group<<GroupShift | P2PBit | tag&SeqMask)
}

// Group returns the group id of t.
func Group(t transport.Tag) uint64 { return uint64(t) >> GroupShift }

// Seq returns the sequence number (or point-to-point tag) of t.
func Seq(t transport.Tag) uint64 { return uint64(t) & SeqMask }

// IsP2P reports whether t is a point-to-point message's tag.
func IsP2P(t transport.Tag) bool { return uint64(t)&P2PBit != 0 }

// IsReserved reports whether t is one of the notices' tags.
func IsReserved(t transport.Tag) bool { return Group(t) == 1<<24-1 }

// The tags of the backend guard's messages (package backend): the
// fingerprints of a group's backend calls, and the questions and answers
// that find the rank behind after a backend call's deadline; the ranks'
// agreement on auto's backend at Init, and a group's backend id (NCCL's
// unique id, sent by the group's rank 0).
const (
	BackendBehindTag = Reserved | 3<<32
	backendFPTag     = Reserved | 4<<32
	BackendAgreeTag  = Reserved | 5<<32
	backendIDTag     = Reserved | 6<<32
)

// BackendIDTag is the tag of group's backend id.
func BackendIDTag(group uint64) transport.Tag {
	return backendIDTag | transport.Tag(group&(1<<24-1))
}

// BackendFPTag is the tag of group's backend fingerprint ring.
func BackendFPTag(group uint64) transport.Tag {
	return backendFPTag | transport.Tag(group&(1<<24-1))
}

// GroupID is the id of the n-th group made from group parent, of the
// world ranks ranks: the same on every member, never 0 (the world) nor
// all ones (the notices, and transport/tcp's goodbye tag).
func GroupID(parent, n uint64, ranks []int) uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, parent, n, ranks)
	id := h.Sum64() & (1<<24 - 1)
	if id == 0 || id == 1<<24-1 {
		id = 1
	}
	return id
}
