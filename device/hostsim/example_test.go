package hostsim_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/goccl/goccl/device/hostsim"
	"github.com/goccl/goccl/reduceop"
)

// A producer stream fills a buffer and records an event; a consumer stream
// waits for it, reduces, and copies the result back to pinned host memory.
func Example() {
	dev := hostsim.New(hostsim.Latency{Copy: time.Millisecond})
	defer dev.Close()
	ctx := context.Background()

	x, _ := dev.Alloc(reduceop.Float32, 4)
	y, _ := dev.Alloc(reduceop.Float32, 4)
	host, _ := dev.AllocHost(16)
	for i := range 4 {
		binary.LittleEndian.PutUint32(host.Bytes()[4*i:], math.Float32bits(float32(i+1)))
	}

	producer, _ := dev.NewStream()
	consumer, _ := dev.NewStream()
	ready, _ := dev.NewEvent()
	producer.CopyFromHost(x, 0, host.Bytes())
	producer.Copy(y, 0, x, 0, 16)
	producer.Record(ready)

	consumer.WaitEvent(ready)
	consumer.Reduce(reduceop.Sum, y, 0, x, 0, 4) // y = x + x
	consumer.CopyToHost(host.Bytes(), y, 0)
	if err := consumer.Synchronize(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for i := range 4 {
		fmt.Print(math.Float32frombits(binary.LittleEndian.Uint32(host.Bytes()[4*i:])), ";")
	}
	fmt.Println()

	// Host memory the device did not hand out is refused.
	err := consumer.CopyToHost(make([]byte, 16), y, 0)
	fmt.Println(errors.Is(err, hostsim.ErrNotPinned))
	// Output:
	// 2;4;6;8;
	// true
}

// The timeline shows what each stream ran, in order, with its times.
func ExampleDevice_StartTimeline() {
	dev := hostsim.New(hostsim.Latency{Launch: time.Millisecond})
	defer dev.Close()
	dev.StartTimeline()
	s, _ := dev.NewStream()
	stream := s.(*hostsim.Stream)
	stream.Launch("forward", func() {})
	h, _ := stream.Hold()
	stream.Launch("backward", func() {})
	h.Release()
	stream.Synchronize(context.Background())
	slow := true
	for _, sp := range dev.Timeline() {
		fmt.Printf("stream %d: %v %q\n", sp.Stream, sp.Kind, sp.Name)
		if sp.Kind == hostsim.KindLaunch && sp.End.Sub(sp.Start) < time.Millisecond {
			slow = false
		}
	}
	fmt.Println("every launch took at least 1ms:", slow)
	// Output:
	// stream 0: launch "forward"
	// stream 0: hold ""
	// stream 0: launch "backward"
	// every launch took at least 1ms: true
}
