package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sort"
	"time"

	"github.com/goccl/goccl/reduceop"
)

// limitsMain runs `goccl limits`: the physical limits that goccl's figures
// are compared against, measured on this machine: memory copy bandwidth,
// float32 add bandwidth, single-stream TCP loopback throughput and the
// 1-byte TCP loopback round trip. Each figure is the median of several
// runs.
func limitsMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	size := fs.String("size", "64M", "buffer and message size for the bandwidth figures")
	runs := fs.Int("runs", 7, "runs per figure (the median is reported)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	n, err := parseSize(*size)
	if err != nil || n < 4 {
		fmt.Fprintln(stderr, "goccl limits: bad -size", *size)
		return 2
	}
	n &^= 3
	rows, err := measureLimits(ctx, int(n), *runs)
	if err != nil {
		fmt.Fprintln(stderr, "goccl limits:", err)
		return 1
	}
	fmt.Fprintf(stdout, "# goccl limits: median of %d runs, %s buffers\n", *runs, *size)
	for _, r := range rows {
		fmt.Fprintf(stdout, "%-34s %12.3f %s\n", r.name, r.value, r.unit)
	}
	return 0
}

type limit struct {
	name  string
	value float64
	unit  string
}

func median(xs []float64) float64 {
	sort.Float64s(xs)
	return xs[len(xs)/2]
}

// rate runs f runs times and returns the median bytes/s, f moving bytes
// bytes per call.
func rate(runs int, bytes int, f func() error) (float64, error) {
	var xs []float64
	for i := 0; i < runs; i++ {
		t := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		xs = append(xs, float64(bytes)/time.Since(t).Seconds())
	}
	return median(xs), nil
}

func measureLimits(ctx context.Context, n, runs int) ([]limit, error) {
	dst, src := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)                                                        // fault the pages in
	cp, _ := rate(runs, 2*n, func() error { copy(dst, src); return nil }) // 1 read + 1 write
	add, err := rate(runs, 3*n, func() error {                            // 2 reads + 1 write
		return reduceop.Apply(reduceop.Float32, reduceop.Sum, dst, src)
	})
	if err != nil {
		return nil, err
	}
	tput, bidi, rtt, err := loopback(ctx, n, runs)
	if err != nil {
		return nil, err
	}
	return []limit{
		{"memory copy (Go copy, 1R+1W)", cp / 1e9, "GB/s"},
		{"float32 add (reduceop, 2R+1W)", add / 1e9, "GB/s"},
		{"TCP loopback, one stream", tput / 1e9, "GB/s"},
		{"TCP loopback, both ways at once", bidi / 1e9, "GB/s each way"},
		{"TCP loopback 1-byte round trip", rtt * 1e6, "us"},
	}, nil
}

// loopback measures single-stream throughput (n-byte messages) and the
// 1-byte round trip between two sockets on 127.0.0.1, with the socket
// settings transport/tcp uses.
func loopback(ctx context.Context, n, runs int) (tput, bidi, rtt float64, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, 0, err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	var d net.Dialer
	a, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return 0, 0, 0, err
	}
	defer a.Close()
	b, ok := <-accepted
	if !ok {
		return 0, 0, 0, fmt.Errorf("accept failed")
	}
	defer b.Close()
	for _, c := range []net.Conn{a, b} {
		tc := c.(*net.TCPConn)
		tc.SetNoDelay(true)
		tc.SetReadBuffer(4 << 20)
		tc.SetWriteBuffer(4 << 20)
		// Nothing here may hang: a stuck measurement fails after a
		// generous bound, and Ctrl-C (ctx) interrupts it.
		tc.SetDeadline(time.Now().Add(10 * time.Minute))
		stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	// Throughput: a writes n bytes, b reads them all, b acknowledges.
	msg, sink := make([]byte, n), make([]byte, n)
	echo := make(chan error, 1)
	go func() {
		for i := 0; i < runs+1; i++ {
			if _, err := io.ReadFull(b, sink); err != nil {
				echo <- err
				return
			}
			if _, err := b.Write(sink[:1]); err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	one := make([]byte, 1)
	send := func() error {
		if _, err := a.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(a, one)
		return err
	}
	if err := send(); err != nil { // warm-up
		return 0, 0, 0, err
	}
	tput, err = rate(runs, n, send)
	if err != nil {
		return 0, 0, 0, err
	}
	if err := <-echo; err != nil {
		return 0, 0, 0, err
	}
	// Both directions at once, as a 2-rank ring runs: each side writes n
	// bytes while it reads the other's n bytes.
	// Every write and read runs in its own goroutine, so neither
	// direction waits for the other to be read.
	sinkA := make([]byte, n)
	bidi, err = rate(runs, n, func() error {
		errc := make(chan error, 4)
		for _, pair := range [][2]net.Conn{{a, b}, {b, a}} {
			go func() {
				_, err := pair[0].Write(msg)
				errc <- err
			}()
		}
		go func() { _, err := io.ReadFull(b, sink); errc <- err }()
		go func() { _, err := io.ReadFull(a, sinkA); errc <- err }()
		return errors.Join(<-errc, <-errc, <-errc, <-errc)
	})
	if err != nil {
		return 0, 0, 0, err
	}
	// Round trip: 1 byte there and back, many times.
	const pings = 2000
	go func() {
		buf := make([]byte, 1)
		for i := 0; i < pings*runs; i++ {
			if _, err := io.ReadFull(b, buf); err != nil {
				return
			}
			b.Write(buf)
		}
	}()
	var rtts []float64
	for r := 0; r < runs; r++ {
		t := time.Now()
		for i := 0; i < pings; i++ {
			if _, err := a.Write(one); err != nil {
				return 0, 0, 0, err
			}
			if _, err := io.ReadFull(a, one); err != nil {
				return 0, 0, 0, err
			}
		}
		rtts = append(rtts, time.Since(t).Seconds()/pings)
	}
	return tput, bidi, median(rtts), nil
}
