//go:build !linux

package quiet

import (
	"errors"
	"net"
)

// Wrap refuses where there is no epoll: the caller keeps c.
func Wrap(c *net.TCPConn) (net.Conn, error) { return nil, errors.ErrUnsupported }
