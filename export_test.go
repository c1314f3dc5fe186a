package goccl

import (
	"net"

	"github.com/goccl/goccl/transport"
)

// SetTestWrapConn makes Init wrap each of its TCP connections with f once
// the handshake has passed (tcp.Config.WrapConn), so that tests can inject
// faults into live links; nil removes the wrapper. Call it before Init.
func SetTestWrapConn(f func(peer int, c net.Conn) net.Conn) { testWrapConn = f }

// LinkedTo reports whether c's endpoint holds a link to world rank peer
// (always true where links are not made on demand).
func LinkedTo(c *Comm, peer int) bool {
	if lk, ok := c.shared.counts.Endpoint.(transport.Linker); ok {
		return lk.Linked(peer)
	}
	return true
}

// SetTestShrinkHook makes Shrink call f at each stage of a round:
// "registered", "agreed", "connected" (so that a test can kill its rank
// there); nil removes it.
func SetTestShrinkHook(f func(stage string)) { testShrinkHook = f }

// PackedBytes returns how many bytes c's calls have copied into and out of
// packed buffers (the list collectives that do not run on their slices).
func PackedBytes(c *Comm) int64 { return c.shared.packed.Load() }
