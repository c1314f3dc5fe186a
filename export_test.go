package goccl

import "net"

// SetTestWrapConn makes Init wrap each of its TCP connections with f once
// the handshake has passed (tcp.Config.WrapConn), so that tests can inject
// faults into live links; nil removes the wrapper. Call it before Init.
func SetTestWrapConn(f func(peer int, c net.Conn) net.Conn) { testWrapConn = f }

// SetTestShrinkHook makes Shrink call f at each stage of a round:
// "registered", "agreed", "connected" (so that a test can kill its rank
// there); nil removes it.
func SetTestShrinkHook(f func(stage string)) { testShrinkHook = f }
