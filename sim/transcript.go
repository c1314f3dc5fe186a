package sim

import (
	"cmp"
	"fmt"
	"io"
	"slices"
)

// Transcript writes the sends of events (from a run with Config.Record)
// step by step, in the form of the step pictures in the algorithms' doc
// comments and of algotest's transcripts:
//
//	step 1: rank 0 -> rank 1: 16 bytes
//
// sorted by step, sender, receiver and send order. With times it adds
// each message's virtual start and arrival in microseconds.
func Transcript(w io.Writer, events []Event, times bool) error {
	var sends []Event
	for _, e := range events {
		if e.Kind == Send {
			sends = append(sends, e)
		}
	}
	slices.SortStableFunc(sends, func(a, b Event) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.seq, b.seq))
	})
	for _, e := range sends {
		var err error
		if times {
			_, err = fmt.Fprintf(w, "step %d: rank %d -> rank %d: %d bytes   (%.3f .. %.3f us)\n", e.Step, e.Rank, e.Peer, e.Bytes, e.Start*1e6, e.End*1e6)
		} else {
			_, err = fmt.Fprintf(w, "step %d: rank %d -> rank %d: %d bytes\n", e.Step, e.Rank, e.Peer, e.Bytes)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
