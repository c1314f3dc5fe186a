// Package transporttest implements a conformance suite for
// transport.Endpoint implementations, in the manner of x/net's nettest.
//
// A transport's test calls Run with a function that builds a mesh:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T, size int) []transport.Endpoint { return mem.New(size) })
//	}
//
// The suite checks per-(peer, tag) ordering across eager and large
// messages, independence of tags, messages to oneself, zero-length and
// 8 MiB messages, receives posted before and after the send, concurrent
// traffic in both directions from many goroutines, length mismatches
// (ErrProtocol), Close unblocking pending requests (ErrClosed), Wait
// honouring its context, a peer's death (PeerError wrapping ErrPeerClosed),
// and finally that no goroutines are left behind. Every wait is bounded by
// a context timeout, so a broken transport fails rather than hangs.
package transporttest
