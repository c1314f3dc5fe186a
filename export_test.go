package goccl

import "net"

// SetTestWrapConn makes Init wrap each of its TCP connections with f once
// the handshake has passed (tcp.Config.WrapConn), so that tests can inject
// faults into live links; nil removes the wrapper. Call it before Init.
func SetTestWrapConn(f func(peer int, c net.Conn) net.Conn) { testWrapConn = f }
