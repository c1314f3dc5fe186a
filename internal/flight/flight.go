// Package flight is the format of goccl's flight recorder: what each rank
// dumps of its recent collectives, as JSON lines, and what `goccl trace
// analyze` reads back. One file per rank (rank-R.jsonl): a Header line,
// then one Entry per call, oldest first.
package flight

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Header is a dump's first line.
type Header struct {
	Trace  string    `json:"trace"` // always "goccl"
	Rank   int       `json:"rank"`  // world rank
	Size   int       `json:"size"`  // world size
	Job    string    `json:"job,omitempty"`
	Dumped time.Time `json:"dumped"`
	Reason string    `json:"reason"` // "timeout", "abort", "mismatch", "signal", "demand"
	Error  string    `json:"error,omitempty"`
	// Capacity is the ring's size: a full ring has forgotten older calls.
	Capacity int `json:"capacity"`
}

// States of an Entry.
const (
	Issued  = "issued"  // ordered (its sequence number taken), not yet running
	Started = "started" // running: its messages may be on the wire
	Done    = "done"
	Failed  = "failed"
)

// Entry is one call as this rank saw it.
type Entry struct {
	Group uint64 `json:"group"` // 0: the world
	Seq   uint64 `json:"seq"`   // the call's number in its group, from 1
	Op    string `json:"op"`    // as the comms log names it: "all_reduce", ...
	Count int64  `json:"count"` // elements, -1 where ranks may differ
	DType string `json:"dtype,omitempty"`
	RedOp string `json:"redop,omitempty"`
	Root  int    `json:"root"` // -1: none
	Algo  string `json:"algo,omitempty"`
	// Ranks is the group's world ranks (omitted for the world).
	Ranks []int `json:"ranks,omitempty"`
	// WaitingOn lists the group ranks this call was waiting on when the
	// dump was taken (only for a call in flight).
	WaitingOn []int     `json:"waiting_on,omitempty"`
	State     string    `json:"state"`
	Issued    time.Time `json:"issued"`
	Started   time.Time `json:"started,omitzero"`
	Ended     time.Time `json:"ended,omitzero"` // a failed call's end; a done one has none
	Error     string    `json:"error,omitempty"`
	Caller    string    `json:"caller,omitempty"` // the user's function that made the call
}

// Write writes a dump.
func Write(w io.Writer, h Header, entries []Entry) error {
	h.Trace = "goccl"
	enc := json.NewEncoder(w)
	if err := enc.Encode(h); err != nil {
		return err
	}
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// Read reads a dump. It refuses a file whose first line is not a goccl
// header, and names the line of any entry it cannot read.
func Read(r io.Reader) (Header, []Entry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var h Header
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return h, nil, err
		}
		return h, nil, fmt.Errorf("flight: empty dump")
	}
	if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Trace != "goccl" {
		return h, nil, fmt.Errorf("flight: line 1 is not a goccl trace header")
	}
	var es []Entry
	for n := 2; sc.Scan(); n++ {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return h, es, fmt.Errorf("flight: line %d: %w", n, err)
		}
		es = append(es, e)
	}
	return h, es, sc.Err()
}
