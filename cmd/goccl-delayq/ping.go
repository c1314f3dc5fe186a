//go:build linux

package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"time"
)

// pingMain runs the calibration's two ends: pong echoes every byte it
// reads on ADDR, ping times one-byte round trips to it. TCP rather than
// ICMP so that no ping program is needed and the packets take the path
// (and the queue) that the ranks' links take.
func pingMain(mode string, args []string) error {
	fs := flag.NewFlagSet("goccl-delayq "+mode, flag.ExitOnError)
	n := fs.Int("n", 2000, "timed round trips (ping)")
	warm := fs.Int("w", 200, "round trips before the timed ones (ping)")
	fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: goccl-delayq %s [flags] ADDR", mode)
	}
	addr := fs.Arg(0)
	if mode == "pong" {
		return pong(addr)
	}
	if *n < 1 || *warm < 0 {
		return fmt.Errorf("ping: -n %d -w %d", *n, *warm)
	}
	rtt, err := ping(addr, *n, *warm)
	if err != nil {
		return err
	}
	slices.Sort(rtt)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	fmt.Printf("%.1f %.1f %.1f\n", us(rtt[len(rtt)/2]), us(rtt[0]), us(rtt[len(rtt)*9/10]))
	return nil
}

func pong(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("pong: %w", err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("pong: %w", err)
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// ping returns n round-trip times of one byte to a pong at addr, after
// warm untimed ones. The dial is retried for a few seconds since the
// pong may have just been started.
func ping(addr string, n, warm int) ([]time.Duration, error) {
	var c net.Conn
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	defer c.Close()
	b := []byte{1}
	rtt := make([]time.Duration, 0, n)
	for i := 0; i < warm+n; i++ {
		t := time.Now()
		if _, err := c.Write(b); err != nil {
			return nil, fmt.Errorf("ping: %w", err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return nil, fmt.Errorf("ping: %w", err)
		}
		if i >= warm {
			rtt = append(rtt, time.Since(t))
		}
	}
	return rtt, nil
}
