package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/reduceop"
)

const limitsUsage = `usage: goccl limits [flags]

Measures the limits of this machine that goccl's figures compare with:
memory copy and float32 add bandwidth, single-stream TCP loopback
throughput one way and both ways at once, the 1-byte loopback round
trip, the 32-byte loopback exchange with polled receives (the pattern of
a 2-rank 8-byte allreduce, with nothing around it), and on Linux the
shared-memory figures between two processes: the one-way bandwidth of a
message copied in and out of a mapped segment (transport/shm's ring
path), the round trip of one cache line between them, and an exchange
of 8 bytes through it (a 2-rank allreduce on the board, with nothing
around it). Each figure is the median of -runs runs.

flags:
`

// limitsMain runs `goccl limits`: the physical limits that goccl's figures
// are compared against, measured on this machine: memory copy bandwidth,
// float32 add bandwidth, single-stream TCP loopback throughput one way and
// both ways at once, the 1-byte TCP loopback round trip and the polled
// 32-byte exchange (limits_exchange_linux.go), the loopback figures in one
// process and (with 2 CPUs or more) between two processes bound to CPUs of
// their own, the way goccl run starts ranks, and (on Linux, with 2 CPUs or
// more) the shared-memory copy bandwidth, cache-line round trip and 8-byte
// exchange between two such processes (limits_shm_linux.go). Each figure is
// the median of several runs.
func limitsMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, limitsUsage)
		fs.PrintDefaults()
	}
	size := fs.String("size", "64M", "buffer and message size for the bandwidth figures")
	runs := fs.Int("runs", 7, "runs per figure (the median is reported)")
	serve := fs.Bool("loopback-serve", false, "internal: answer the loopback tests (the passive process)")
	measure := fs.String("loopback-measure", "", "internal: run the loopback tests against this address")
	shmServe := fs.Bool("shm-serve", false, "internal: answer the shared-memory tests (segment at fd 3)")
	shmMeasure := fs.Bool("shm-measure", false, "internal: run the shared-memory tests (segment at fd 3)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goccl limits: unexpected arguments %q (goccl limits takes flags only)\n", fs.Args())
		return 2
	}
	n, err := parseSize(*size)
	if err != nil || n < 4 {
		fmt.Fprintln(stderr, "goccl limits: bad -size", *size)
		return 2
	}
	n &^= 3
	switch {
	case *serve:
		err = loopbackServer(ctx, int(n), stdout)
	case *measure != "":
		err = loopbackClient(ctx, *measure, int(n), *runs, stdout)
	case *shmServe || *shmMeasure:
		err = shmChild(ctx, *shmMeasure, int(n), *runs, stdout)
	}
	if *serve || *measure != "" || *shmServe || *shmMeasure {
		if err != nil {
			fmt.Fprintln(stderr, "goccl limits:", err)
			return 1
		}
		return 0
	}
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

// errShmLimits: this system has no shared-memory figures.
var errShmLimits = errors.New("shared-memory limits are measured on Linux only")

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
	rows := []limit{
		{"memory copy (Go copy, 1R+1W)", cp / 1e9, "GB/s"},
		{"float32 add (reduceop, 2R+1W)", add / 1e9, "GB/s"},
	}
	lb, err := loopbackInProcess(ctx, n, runs)
	if err != nil {
		return nil, err
	}
	rows = append(rows, lb.rows("")...)
	if cpus := allowedCPUs(); len(cpus) >= 2 {
		lb, err := loopbackProcesses(ctx, n, runs)
		if err != nil {
			return nil, err
		}
		rows = append(rows, lb.rows(", 2 procs")...)
		if sf, err := shmProcesses(ctx, n, runs); err == nil {
			rows = append(rows, sf.rows()...)
		} else if !errors.Is(err, errShmLimits) {
			return nil, err
		}
	}
	return rows, nil
}

// Loopback limits: one TCP connection on 127.0.0.1 with the socket
// settings transport/tcp uses, measured in one process (both ends are
// goroutines) and between two processes bound to CPUs of their own, as
// goccl run and goccl bench start ranks. One end measures (loopbackTests),
// the other answers (loopbackAnswer) what each test asks, named by a
// command byte.
const (
	cmdOneWay = 'o' // read n bytes, answer with 1
	cmdBoth   = 'b' // write n bytes while reading n
	cmdPing   = 'p' // echo pings bytes, one at a time
	cmdSwap   = 'x' // exchange swapBytes with the other end, swaps times
	cmdQuit   = 'q'
	pings     = 2000
	swaps     = 20000
	swapBytes = 32 // an 8-byte payload and the framing around it
)

// loopbackFigures are the loopback limits, in bytes/s and seconds.
type loopbackFigures struct{ tput, bidi, rtt, swap float64 }

func (f loopbackFigures) rows(where string) []limit {
	return []limit{
		{"TCP loopback, one stream" + where, f.tput / 1e9, "GB/s"},
		{"TCP loopback, both ways at once" + where, f.bidi / 1e9, "GB/s each way"},
		{"TCP loopback 1-byte round trip" + where, f.rtt * 1e6, "us"},
		{"TCP loopback 32-byte exchange, polled" + where, f.swap * 1e6, "us"},
	}
}

// tuneConn gives c transport/tcp's socket settings, and a deadline that
// bounds every measurement and that ctx ends at once (Ctrl-C).
func tuneConn(ctx context.Context, c net.Conn) (stop func() bool) {
	tc := c.(*net.TCPConn)
	tc.SetNoDelay(true)
	tc.SetReadBuffer(4 << 20)
	tc.SetWriteBuffer(4 << 20)
	tc.SetDeadline(time.Now().Add(10 * time.Minute))
	return context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
}

// loopbackInProcess measures with both ends in this process.
func loopbackInProcess(ctx context.Context, n, runs int) (loopbackFigures, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return loopbackFigures{}, err
	}
	defer ln.Close()
	answered := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			answered <- err
			return
		}
		defer c.Close()
		defer tuneConn(ctx, c)()
		answered <- loopbackAnswer(c, n)
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return loopbackFigures{}, err
	}
	defer c.Close()
	defer tuneConn(ctx, c)()
	f, err := loopbackTests(c, n, runs)
	if err != nil {
		c.Close() // the answering end may wait for a command: end it
	}
	return f, errors.Join(err, <-answered)
}

// loopbackProcesses measures between two child processes of this binary,
// each bound to a CPU of its own: the first answers (it prints the
// address it listens on), the second measures and prints the figures.
func loopbackProcesses(ctx context.Context, n, runs int) (loopbackFigures, error) {
	exe, err := os.Executable()
	if err != nil {
		return loopbackFigures{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	size := strconv.Itoa(n)
	cpus := allowedCPUs()
	server := exec.CommandContext(ctx, exe, "limits", "-loopback-serve", "-size", size)
	out, err := server.StdoutPipe()
	if err != nil {
		return loopbackFigures{}, err
	}
	server.Stderr = os.Stderr
	if err := startBound(server, rankCPUs(cpus, 2, 0)); err != nil {
		return loopbackFigures{}, err
	}
	defer func() {
		cancel() // a server still waiting (the client failed) is killed
		server.Wait()
	}()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return loopbackFigures{}, fmt.Errorf("loopback server: %w", err)
	}
	client := exec.CommandContext(ctx, exe, "limits", "-loopback-measure", strings.TrimSpace(addr),
		"-size", size, "-runs", strconv.Itoa(runs))
	var res strings.Builder
	client.Stdout, client.Stderr = &res, os.Stderr
	if err := startBound(client, rankCPUs(cpus, 2, 1)); err != nil {
		return loopbackFigures{}, err
	}
	if err := client.Wait(); err != nil {
		return loopbackFigures{}, fmt.Errorf("loopback client: %w", err)
	}
	var f loopbackFigures
	if _, err := fmt.Sscan(res.String(), &f.tput, &f.bidi, &f.rtt, &f.swap); err != nil {
		return loopbackFigures{}, fmt.Errorf("loopback client said %q: %w", res.String(), err)
	}
	return f, nil
}

// loopbackServer is the answering process: it listens, prints its
// address, and answers one connection.
func loopbackServer(ctx context.Context, n int, stdout io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Fprintln(stdout, ln.Addr())
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	defer tuneConn(ctx, c)()
	return loopbackAnswer(c, n)
}

// loopbackClient is the measuring process: it prints the three figures.
func loopbackClient(ctx context.Context, addr string, n, runs int, stdout io.Writer) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	defer tuneConn(ctx, c)()
	f, err := loopbackTests(c, n, runs)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, f.tput, f.bidi, f.rtt, f.swap)
	return err
}

// loopbackTests measures over c, whose other end runs loopbackAnswer:
// single-stream throughput (this end writes n bytes, the other reads them
// all and answers), both directions at once (each end writes n bytes while
// it reads the other's n, as a 2-rank ring does), and the 1-byte round
// trip.
func loopbackTests(c net.Conn, n, runs int) (f loopbackFigures, err error) {
	msg, sink, one := make([]byte, n), make([]byte, n), make([]byte, 1)
	oneWay := func() error {
		if _, err := c.Write([]byte{cmdOneWay}); err != nil {
			return err
		}
		if _, err := c.Write(msg); err != nil {
			return err
		}
		_, err := io.ReadFull(c, one)
		return err
	}
	if err := oneWay(); err != nil { // warm-up
		return f, err
	}
	if f.tput, err = rate(runs, n, oneWay); err != nil {
		return f, err
	}
	if f.bidi, err = rate(runs, n, func() error {
		if _, err := c.Write([]byte{cmdBoth}); err != nil {
			return err
		}
		return both(c, msg, sink)
	}); err != nil {
		return f, err
	}
	var rtts []float64
	for range runs {
		if _, err := c.Write([]byte{cmdPing}); err != nil {
			return f, err
		}
		t := time.Now()
		for range pings {
			if _, err := c.Write(one); err != nil {
				return f, err
			}
			if _, err := io.ReadFull(c, one); err != nil {
				return f, err
			}
		}
		rtts = append(rtts, time.Since(t).Seconds()/pings)
	}
	f.rtt = median(rtts)
	var swapTimes []float64
	for range runs {
		if _, err := c.Write([]byte{cmdSwap}); err != nil {
			return f, err
		}
		t := time.Now()
		if err := exchange(c, swapBytes, swaps); err != nil {
			return f, err
		}
		swapTimes = append(swapTimes, time.Since(t).Seconds()/swaps)
	}
	f.swap = median(swapTimes)
	_, err = c.Write([]byte{cmdQuit})
	return f, err
}

// loopbackAnswer answers loopbackTests on c until it says quit.
func loopbackAnswer(c net.Conn, n int) error {
	msg, sink, cmd := make([]byte, n), make([]byte, n), make([]byte, 1)
	for {
		if _, err := io.ReadFull(c, cmd); err != nil {
			return err
		}
		var err error
		switch cmd[0] {
		case cmdOneWay:
			if _, err = io.ReadFull(c, sink); err == nil {
				_, err = c.Write(sink[:1])
			}
		case cmdBoth:
			err = both(c, msg, sink)
		case cmdPing:
			for i := 0; i < pings && err == nil; i++ {
				if _, err = io.ReadFull(c, cmd); err == nil {
					_, err = c.Write(cmd)
				}
			}
		case cmdSwap:
			err = exchange(c, swapBytes, swaps)
		case cmdQuit:
			return nil
		default:
			return fmt.Errorf("loopback: unknown command %q", cmd[0])
		}
		if err != nil {
			return err
		}
	}
}

// both writes msg to c while it reads len(sink) bytes from it, each in its
// own goroutine, so that neither direction waits for the other.
func both(c net.Conn, msg, sink []byte) error {
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		wrote <- err
	}()
	_, err := io.ReadFull(c, sink)
	return errors.Join(err, <-wrote)
}
