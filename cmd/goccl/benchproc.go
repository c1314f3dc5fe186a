package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/goccl/goccl"
)

// benchWorkerEnv marks a process started by benchProcesses as one rank.
const benchWorkerEnv = "GOCCL_BENCH_WORKER"

// benchProcesses runs the benchmark as cfg.ranks processes of this same
// binary, each started with the torchrun environment (as `goccl run`
// would), and relays rank 0's table. It returns no rows: rank 0 prints
// them itself. The ranks connect over cfg.transport: each passes it to
// Init, so -transport tcp is TCP loopback whatever GOCCL_TRANSPORT says.
func benchProcesses(ctx context.Context, args []string, cfg *benchConfig, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return fmt.Errorf("picking a free port: %w", err)
	}
	rc := &runConfig{nproc: cfg.ranks, nnodes: 1, masterAddr: "127.0.0.1", masterPort: port, cpuBind: cfg.cpuBind}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, cfg.ranks)
	var wg sync.WaitGroup
	for r := 0; r < cfg.ranks; r++ {
		// -n goes first and explicitly: a rank bound to its share of the
		// CPUs would count fewer CPUs, and so another default -n.
		cmd := exec.CommandContext(ctx, exe, append([]string{"bench", "-n", strconv.Itoa(cfg.ranks)}, args...)...)
		cmd.Env = append(rankEnv(rc, r), benchWorkerEnv+"=1")
		cmd.Stderr = stderr
		if r == 0 {
			cmd.Stdout = stdout
		}
		if err := startBound(cmd, rc.cpus(r)); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Wait(); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel() // one rank failed: stop the others
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// benchWorker is one rank of benchProcesses, or of a launcher's job with
// -join.
func benchWorker(ctx context.Context, cfg *benchConfig, stdout, stderr io.Writer) ([]result, bool, error) {
	c, err := goccl.Init(ctx, goccl.WithMismatchCheck(cfg.mismatchCheck), goccl.WithTransport(cfg.transport))
	if err != nil {
		return nil, false, err
	}
	defer c.Close()
	if cfg.join {
		// The launcher decided the job's size.
		if cfg.nSet && cfg.ranks != c.Size() {
			return nil, false, fmt.Errorf("-n %d, but the job has %d ranks", cfg.ranks, c.Size())
		}
		cfg.ranks = c.Size()
		if err := cfg.checkRanks(); err != nil {
			return nil, false, err
		}
	}
	if cfg.peerLinks, err = peerLinks(ctx, c); err != nil {
		return nil, false, err
	}
	var progress io.Writer
	if c.Rank() == 0 && !cfg.quiet {
		progress = stderr
	}
	if cfg.cpuprofile != "" {
		// Every rank's: the ranks' CPUs may run at different speeds, and
		// the slowest rank's path sets the loop's pace (BENCHMARKS.md).
		f, err := os.Create(profilePath(cfg.cpuprofile, c.Rank()))
		if err != nil {
			return nil, false, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, false, err
		}
		defer pprof.StopCPUProfile()
	}
	rows, err := benchRank(ctx, c, cfg, progress)
	return rows, c.Rank() == 0, err
}

// peerLinks says which transport each rank reaches its peers over, as
// Init chose them (shared memory within a host, TCP or InfiniBand
// between): "rank 0: shm 1, tcp 2; rank 1: ...", gathered to every rank.
func peerLinks(ctx context.Context, c *goccl.Comm) (string, error) {
	count := map[string]int{}
	for q := range c.Size() {
		if q != c.Rank() {
			count[c.TransportFor(q)]++
		}
	}
	var mine []string
	for _, t := range slices.Sorted(maps.Keys(count)) {
		name := t
		if name == "" {
			name = "?"
		}
		mine = append(mine, fmt.Sprintf("%s %d", name, count[t]))
	}
	all, err := goccl.AllGatherObject(ctx, c, strings.Join(mine, ", "))
	if err != nil {
		return "", err
	}
	for r := range all {
		all[r] = fmt.Sprintf("rank %d: %s", r, all[r])
	}
	return strings.Join(all, "; "), nil
}

// profilePath is where rank writes its CPU profile for -cpuprofile path:
// rank 0 to path itself, rank r to path.r.
func profilePath(path string, rank int) string {
	if rank == 0 {
		return path
	}
	return fmt.Sprintf("%s.%d", path, rank)
}
