// Package devicetest is the conformance suite for implementations of
// package device: every device, the pure-Go device/hostsim in CI and
// device/cuda on a GPU, calls Run from one test.
//
//	func TestConformance(t *testing.T) {
//		dev := hostsim.New()
//		defer dev.Close()
//		devicetest.Run(t, dev)
//	}
//
// Run uses only the device interfaces, and host memory only from
// Device.AllocHost, so the same checks run on every device: allocation,
// copies at odd sizes and offsets, range errors refused before anything is
// enqueued, in-order streams, streams joined by events (a WaitEvent takes
// the Record before it), never-recorded events, Holds, Synchronize and
// Event.Wait ending with their context, Destroy letting pending work run,
// and Reduce and Scale against reduceop's host loops for every dtype and
// op the device reduces (device.CheckReduce; the others must be refused)
// at awkward counts and offsets, with NaN, signed zeros and infinities
// in the inputs and guard elements around every range.
//
// Where ordering must be proven rather than hoped for, the suite stops a
// stream with a Hold, so that a device that ignores an event or a Hold
// fails every time, not by chance. It asserts no timings; its only clock
// is a generous bound on every wait, so that a device that never finishes
// fails instead of hanging.
//
// RunMisuse checks, separately, what the contract forbids without
// requiring a device to detect it: enqueueing on a destroyed stream, using
// a freed buffer or a destroyed event. A device that tracks these (hostsim
// does) calls it too.
package devicetest
