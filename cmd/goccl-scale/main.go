// Command goccl-scale is one rank of the scale measurement that
// scripts/scale.sh runs under `goccl run -n N`: it joins the job with
// goccl.Init, makes 20 allreduces of 8 bytes, one of 1 MiB and an
// allgather, and then reports what the rank holds: the time Init took,
// its open descriptors (/proc/self/fd), goroutines and resident memory.
// Rank 0 gathers every rank's figures and prints one line:
//
//	SCALE n=N init_max=… init_after_last_start=… init_cpu=… start_cpu=… fds=R0/MAX goroutines=R0/MAX rss_mb=R0/MAX store_requests=…
//
// where R0 is rank 0's figure and MAX the largest of the other ranks'.
// init_max is the slowest rank's Init, which includes waiting for the
// ranks that the launcher started last; init_after_last_start is from the
// last rank's start of Init to the last rank's return (one clock: the
// ranks share the machine), Init's own cost without the launch's skew.
// init_cpu is the CPU time (user and system) all ranks spent in Init,
// start_cpu what they spent before it (the Go runtime's start and main's
// first lines): on a machine with fewer cores than ranks the two together
// bound init_max from below.
//
// With SCALE_INIT_ONLY=1 a rank reports right after Init, without the
// collectives (to profile Init alone).
//
// Rank 0 hosts the rendezvous store itself, in this process as Init would,
// but through the store package so that it can count the requests the
// store served; every rank runs with GOCCL_EXTERNAL_STORE=1 so that Init
// dials it rather than host another (scripts/scale.sh sets it).
package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/store"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goccl-scale:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	var srv *store.Server
	if rank == 0 {
		addr := net.JoinHostPort(os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT"))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		srv = store.NewServer(store.Options{})
		go srv.Serve(ctx, ln)
		defer srv.Close()
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	c, err := goccl.Init(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	t1 := time.Now()
	initCPU := cpuTime() - cpu0
	initDur := t1.Sub(t0)
	n := c.Size()

	if os.Getenv("SCALE_INIT_ONLY") != "1" {
		if err := work(ctx, c, rank); err != nil {
			return err
		}
	}
	stats := []int64{int64(initDur), fds(), int64(runtime.NumGoroutine()), rssKB(), t0.UnixNano(), t1.UnixNano(), int64(initCPU), int64(cpu0)}
	gathered := make([]int64, len(stats)*n)
	if err := c.AllGather(ctx, stats, gathered); err != nil {
		return err
	}
	if rank == 0 {
		var initMax, lastStart, lastEnd, cpuInit, cpuBefore int64
		var others [3]int64
		for r := range n {
			s := gathered[r*len(stats):]
			initMax = max(initMax, s[0])
			lastStart, lastEnd = max(lastStart, s[4]), max(lastEnd, s[5])
			cpuInit += s[6]
			cpuBefore += s[7]
			if r > 0 {
				for i := range others {
					others[i] = max(others[i], s[i+1])
				}
			}
		}
		fmt.Printf("SCALE n=%d init_max=%.3fs init_after_last_start=%.3fs init_cpu=%.3fs start_cpu=%.3fs fds=%d/%d goroutines=%d/%d rss_mb=%.1f/%.1f store_requests=%d\n",
			n, time.Duration(initMax).Seconds(), time.Duration(lastEnd-lastStart).Seconds(),
			time.Duration(cpuInit).Seconds(), time.Duration(cpuBefore).Seconds(), stats[1], others[0], stats[2], others[1],
			float64(stats[3])/1024, float64(others[2])/1024, srv.Requests())
	}
	return c.Barrier(ctx)
}

// fds counts this process's open descriptors.
func fds() int64 {
	es, _ := os.ReadDir("/proc/self/fd")
	return int64(len(es))
}

// rssKB reads VmRSS from /proc/self/status.
func rssKB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}

// cpuTime is the CPU time, user and system, that this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// work is what each rank does between Init and the report: 20 allreduces
// of 8 bytes, one of 1 MiB and an allgather.
func work(ctx context.Context, c *goccl.Comm, rank int) error {
	small := make([]float64, 1)
	for range 20 {
		if err := c.AllReduce(ctx, small, reduceop.Sum); err != nil {
			return err
		}
	}
	big := make([]float32, 1<<18)
	if err := c.AllReduce(ctx, big, reduceop.Sum); err != nil {
		return err
	}
	mine := []int64{int64(rank)}
	all := make([]int64, c.Size())
	return c.AllGather(ctx, mine, all)
}
