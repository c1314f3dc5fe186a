//go:build !linux

package store

import (
	"errors"
	"net"
)

// idleState is empty where there is no idle poller.
type idleState struct{}

// canPark reports false: outside Linux every connection keeps its serving
// goroutine, blocked in Read, for its life.
func canPark(net.Conn) bool { return false }

// idlePoller is never made outside Linux.
type idlePoller struct{}

func newIdlePoller() (*idlePoller, error) {
	return nil, errors.New("idle poller: not built on this platform")
}

func (*idlePoller) park(*srvConn) bool { return false }
func (*idlePoller) unpark(*srvConn)    {}
func (*idlePoller) close()             {}
func (*idlePoller) parked() int        { return 0 }
func (*idlePoller) run()               {}
