package tcp

import "github.com/goccl/goccl/transport"

// ReadBuffersHeld returns the read buffers ep's links hold now.
func ReadBuffersHeld(ep transport.Endpoint) int64 { return ep.(*endpoint).readBufs.Load() }
