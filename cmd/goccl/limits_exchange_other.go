//go:build !linux

package main

import (
	"io"
	"net"
)

// exchange is one end of the exchange limit (limits_exchange_linux.go),
// here with blocking reads.
func exchange(c net.Conn, n, iters int) error {
	msg, buf := make([]byte, n), make([]byte, n)
	for range iters {
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
	}
	return nil
}
