//go:build !linux

// goccl-delayq needs Linux's NFQUEUE; elsewhere it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "goccl-delayq: Linux only (it holds packets queued by iptables' NFQUEUE)")
	os.Exit(2)
}
