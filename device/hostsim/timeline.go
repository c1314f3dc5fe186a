package hostsim

import (
	"fmt"
	"time"
)

// Kind names the kind of work a Span records.
type Kind uint8

// The kinds of stream work.
const (
	KindCopyToHost Kind = iota + 1
	KindCopyFromHost
	KindCopy
	KindReduce
	KindScale
	KindLaunch
	KindWaitEvent
	KindHold
)

var kindNames = [...]string{"", "copy to host", "copy from host", "copy", "reduce", "scale", "launch", "wait event", "hold"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Span is one piece of work as a stream ran it: from when the stream
// started it (after the work before it) to when it finished, latency
// included. A Hold or WaitEvent spans the time its stream was stopped.
type Span struct {
	Stream int    // Stream.ID of the stream that ran it
	Kind   Kind   // what it was
	Name   string // Launch's name; for other kinds a description such as "sum float32 x 7"
	Bytes  int    // bytes copied or written, 0 for a launch, wait or hold
	Start  time.Time
	End    time.Time
}

// StartTimeline makes the device record a Span for every piece of work
// that runs from now on, forgetting any recorded before.
func (d *Device) StartTimeline() {
	d.mu.Lock()
	d.timeline = new([]Span)
	d.mu.Unlock()
}

// Timeline returns the Spans recorded since StartTimeline, in the order
// they finished; nil if StartTimeline was never called.
func (d *Device) Timeline() []Span {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timeline == nil {
		return nil
	}
	return append([]Span(nil), *d.timeline...)
}

func (d *Device) record(sp Span) {
	d.mu.Lock()
	if d.timeline != nil {
		*d.timeline = append(*d.timeline, sp)
	}
	d.mu.Unlock()
}
