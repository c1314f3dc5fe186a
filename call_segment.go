package goccl

import (
	"math/bits"

	"github.com/goccl/goccl/transport"
)

// Segments. The pipelined algorithms (ring reduce-scatter and broadcast,
// the tree allreduce) cut a large message into segments of
// algo.DefaultSegmentBytes, so that the reduction of one overlaps the
// transfer of the next. Where a group's transport would rather have
// others (transport.SegmentHinter: transport/shm, whose receivers pull
// each large message with one system call, wants megabytes), the group
// uses its size instead, for host buffers (peers.SegmentBytes).
//
// Every member of a group must cut alike, or they misread each other's
// messages. Each member asks its endpoint once, when the group is made,
// about every other member, and takes the hint only where every peer has
// one: a group within one host over shm gets it on every member, and a
// group that spans hosts has a peer over TCP on every member, so none
// takes it. Whatever else makes members differ (a setting that differs
// between ranks) is caught by the fingerprint, which carries the choice:
// the first call between two members that chose differently fails with
// ErrMismatch naming both choices.

// segmentLog is the segment size of the group of world ranks in which this
// rank is member me, as log2, or 0 for the algorithms' default: the
// smallest of h's hints for the other members, rounded down to a power of
// two, where h has one for each of them.
func segmentLog(h transport.SegmentHinter, world []int, me int) uint8 {
	if h == nil || len(world) < 2 {
		return 0
	}
	seg := 0
	for i, r := range world {
		if i == me {
			continue
		}
		s := h.SegmentBytes(r)
		if s <= 0 {
			return 0
		}
		if seg == 0 || s < seg {
			seg = s
		}
	}
	return uint8(bits.Len(uint(seg)) - 1)
}

// SegmentBytes implements algo.Segmenter: the group's segment size, or 0
// for the algorithms' default.
func (p *peers) SegmentBytes() int {
	if l := p.c.segLog; l > 0 {
		return 1 << l
	}
	return 0
}
