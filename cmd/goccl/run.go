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
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const runUsage = `usage: goccl run [flags] -- program [args]

Starts -n ranks of program on this machine, as torchrun does, with RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK,
GROUP_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. Each line a rank prints is
prefixed with "[rank] ". When a rank exits non-zero the others get SIGTERM,
then SIGKILL after -grace, and goccl run exits with that rank's code.
SIGINT or SIGTERM to goccl run stops every rank the same way (a second one
kills them at once).

For several machines, run it once per machine with the same -nnodes,
-master-addr and -master-port and a different -node-rank.

flags:
`

// runConfig is what `goccl run` was asked to do.
type runConfig struct {
	nproc      int // ranks on this machine
	nnodes     int
	nodeRank   int
	masterAddr string
	masterPort int
	grace      time.Duration
	cpuBind    bool // bind each local rank to its share of the CPUs (bind.go)
	prog       []string
}

func parseRunFlags(args []string, stderr io.Writer) (*runConfig, error) {
	cfg := &runConfig{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	fs.IntVar(&cfg.nproc, "n", 1, "ranks to start on this machine")
	fs.IntVar(&cfg.nproc, "nproc-per-node", 1, "same as -n")
	fs.IntVar(&cfg.nnodes, "nnodes", 1, "machines in the job")
	fs.IntVar(&cfg.nodeRank, "node-rank", 0, "this machine's index in [0, nnodes)")
	fs.StringVar(&cfg.masterAddr, "master-addr", "127.0.0.1", "host of rank 0, where the rendezvous store listens (required with -nnodes > 1)")
	fs.IntVar(&cfg.masterPort, "master-port", 0, "port of the rendezvous store (default: a free port when -nnodes is 1; required otherwise)")
	fs.DurationVar(&cfg.grace, "grace", 5*time.Second, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.BoolVar(&cfg.cpuBind, "cpu-bind", true, "bind each rank to an equal share of this machine's CPUs when there are at least as many CPUs as ranks (mpirun's --bind-to core)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg.prog = fs.Args()
	switch {
	case len(cfg.prog) == 0:
		return nil, errors.New("no program given: goccl run [flags] -- program [args]")
	case cfg.nproc < 1:
		return nil, fmt.Errorf("-n %d: need at least one rank", cfg.nproc)
	case cfg.nnodes < 1:
		return nil, fmt.Errorf("-nnodes %d: need at least one machine", cfg.nnodes)
	case cfg.nodeRank < 0 || cfg.nodeRank >= cfg.nnodes:
		return nil, fmt.Errorf("-node-rank %d is not in [0, %d)", cfg.nodeRank, cfg.nnodes)
	case cfg.masterPort < 0 || cfg.masterPort > 65535:
		return nil, fmt.Errorf("-master-port %d is not a port number", cfg.masterPort)
	case cfg.nnodes > 1 && cfg.masterPort == 0:
		return nil, errors.New("-master-port is required with -nnodes > 1 (every machine must use the same one)")
	case cfg.nnodes > 1 && !set["master-addr"]:
		return nil, errors.New("-master-addr is required with -nnodes > 1 (the host of node rank 0)")
	case cfg.grace < 0:
		return nil, fmt.Errorf("-grace %v is negative", cfg.grace)
	}
	return cfg, nil
}

// runMain implements `goccl run`.
func runMain(ctx context.Context, args []string) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runCommand(ctx, args, os.Stdout, os.Stderr, sigs)
}

// runCommand is runMain with its outputs and signals given, for tests.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	cfg, err := parseRunFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "goccl run: %v\n", err)
		return 2
	}
	if cfg.masterPort == 0 {
		if cfg.masterPort, err = freePort(); err != nil {
			fmt.Fprintf(stderr, "goccl run: picking a free port: %v\n", err)
			return 1
		}
	}
	return launch(ctx, cfg, &lineWriter{w: stdout}, &lineWriter{w: stderr}, stderr, sigs)
}

// freePort asks the kernel for a free TCP port. It is free when this
// returns; rank 0 binds it moments later, and the race with another
// process taking it first is accepted, as torchrun accepts it.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// rankEnv is the environment of one rank: ours, minus variables that would
// make goccl's discovery see another launcher first, plus the torchrun set.
func rankEnv(cfg *runConfig, localRank int) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OMPI_COMM_WORLD_") {
			continue // mpirun around goccl run: its ranks are not ours
		}
		env = append(env, kv)
	}
	set := func(k string, v int) { env = append(env, k+"="+strconv.Itoa(v)) }
	set("RANK", cfg.nodeRank*cfg.nproc+localRank)
	set("WORLD_SIZE", cfg.nproc*cfg.nnodes)
	set("LOCAL_RANK", localRank)
	set("LOCAL_WORLD_SIZE", cfg.nproc)
	set("GROUP_RANK", cfg.nodeRank)
	set("NODE_RANK", cfg.nodeRank)
	set("GROUP_WORLD_SIZE", cfg.nnodes)
	set("MASTER_PORT", cfg.masterPort)
	env = append(env, "MASTER_ADDR="+cfg.masterAddr)
	if os.Getenv("GOMAXPROCS") == "" {
		// The ranks on this machine share its cores: each gets its share
		// (at least one), as torchrun gives each of several processes a
		// node OMP_NUM_THREADS=1. Ranks that each run as many threads as
		// there are cores fight over them: on 2 cores a 2-rank TCP
		// allreduce of 64 MiB moved 1.47 GB/s (median) with one each
		// against 1.18 with two (BENCHMARKS.md). Set GOMAXPROCS to
		// choose otherwise.
		set("GOMAXPROCS", max(1, runtime.NumCPU()/cfg.nproc))
	}
	return env
}

// cpus returns the CPUs local rank localRank is bound to, nil for none.
func (cfg *runConfig) cpus(localRank int) []int {
	if !cfg.cpuBind {
		return nil
	}
	return rankCPUs(allowedCPUs(), cfg.nproc, localRank)
}

// rankProc is one started rank.
type rankProc struct {
	rank   int
	cmd    *exec.Cmd
	pipes  []*os.File // read ends of its stdout and stderr
	copied sync.WaitGroup
	status error // from Wait
}

// signalGroup sends sig to the rank's process group, reaching the
// processes it started too. A group with no process left is not an error.
func (p *rankProc) signalGroup(sig syscall.Signal) {
	syscall.Kill(-p.cmd.Process.Pid, sig)
}

// exitCode turns a rank's Wait error into a shell-style exit code.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

func startRank(cfg *runConfig, localRank int, stdout, stderr *lineWriter) (*rankProc, error) {
	p := &rankProc{rank: cfg.nodeRank*cfg.nproc + localRank}
	prefix := []byte(fmt.Sprintf("[%d] ", p.rank))
	cmd := exec.Command(cfg.prog[0], cfg.prog[1:]...)
	cmd.Env = rankEnv(cfg, localRank)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var writeEnds []*os.File
	for _, dst := range []*lineWriter{stdout, stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(p.pipes)
			closeAll(writeEnds)
			return nil, err
		}
		p.pipes = append(p.pipes, r)
		writeEnds = append(writeEnds, w)
		p.copied.Add(1)
		go func() {
			defer p.copied.Done()
			copyPrefixed(dst, r, prefix)
		}()
	}
	cmd.Stdout, cmd.Stderr = writeEnds[0], writeEnds[1]
	p.cmd = cmd
	err := startBound(cmd, cfg.cpus(localRank))
	closeAll(writeEnds) // the child holds its copies
	if err != nil {
		closeAll(p.pipes)
		p.copied.Wait()
		return nil, fmt.Errorf("rank %d: %w", p.rank, err)
	}
	return p, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// launch starts the ranks and supervises them until all have exited.
func launch(ctx context.Context, cfg *runConfig, stdout, stderr *lineWriter, log io.Writer, sigs <-chan os.Signal) int {
	procs := make([]*rankProc, 0, cfg.nproc)
	exits := make(chan *rankProc, cfg.nproc)
	for lr := range cfg.nproc {
		p, err := startRank(cfg, lr, stdout, stderr)
		if err != nil {
			fmt.Fprintf(log, "goccl run: %v\n", err)
			for _, q := range procs {
				q.signalGroup(syscall.SIGKILL)
			}
			for range procs {
				<-exits
			}
			finish(procs, 0)
			return 1
		}
		procs = append(procs, p)
		go func() {
			p.status = p.cmd.Wait()
			exits <- p
		}()
	}

	var (
		failed    *rankProc // first rank to exit non-zero
		stopping  bool      // SIGTERM sent to every rank
		killTimer <-chan time.Time
		ctxDone   = ctx.Done()
		nsig      int
		lastSig   syscall.Signal = syscall.SIGINT
	)
	stop := func() {
		if stopping {
			return
		}
		stopping = true
		for _, p := range procs {
			p.signalGroup(syscall.SIGTERM)
		}
		killTimer = time.After(cfg.grace)
	}
	kill := func() {
		for _, p := range procs {
			p.signalGroup(syscall.SIGKILL)
		}
	}
	for left := len(procs); left > 0; {
		select {
		case p := <-exits:
			left--
			if code := exitCode(p.status); code != 0 && failed == nil && !stopping {
				failed = p
				fmt.Fprintf(log, "goccl run: rank %d exited with code %d (%v); stopping the other ranks\n", p.rank, code, p.status)
				stop()
			}
		case <-ctxDone:
			ctxDone = nil
			stop()
		case s := <-sigs:
			nsig++
			if ss, ok := s.(syscall.Signal); ok {
				lastSig = ss
			}
			if nsig > 1 {
				kill()
			}
			stop()
		case <-killTimer:
			killTimer = nil
			kill()
		}
	}
	finish(procs, cfg.grace)
	switch {
	case failed != nil:
		return exitCode(failed.status)
	case stopping:
		return 128 + int(lastSig)
	}
	return 0
}

// finish cleans up after every rank has exited: processes the ranks left
// behind in their groups get SIGTERM, then SIGKILL after grace if they still
// hold the output pipes, and the pipes are drained.
func finish(procs []*rankProc, grace time.Duration) {
	for _, p := range procs {
		p.signalGroup(syscall.SIGTERM)
	}
	done := make(chan struct{})
	go func() {
		for _, p := range procs {
			p.copied.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	for _, p := range procs {
		p.signalGroup(syscall.SIGKILL)
	}
	select {
	case <-done:
	case <-time.After(time.Second):
		// Something outside the groups (a daemon that called setsid)
		// still holds a pipe: stop reading it.
		for _, p := range procs {
			closeAll(p.pipes)
		}
		<-done
	}
}

// lineWriter writes whole lines from many ranks to one destination, one
// line per Write, so that lines never interleave.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lineWriter) Write(b []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(b)
}

// copyPrefixed copies r to dst line by line, each line led by prefix. A
// line longer than 64 KiB goes out in pieces, the prefix before the first.
// A last line without a newline gets one.
func copyPrefixed(dst io.Writer, r io.Reader, prefix []byte) {
	br := bufio.NewReaderSize(r, 64<<10)
	buf := make([]byte, 0, 1024)
	atStart := true
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			buf = buf[:0]
			if atStart {
				buf = append(buf, prefix...)
			}
			buf = append(buf, chunk...)
			atStart = chunk[len(chunk)-1] == '\n'
			if err != nil && err != bufio.ErrBufferFull && !atStart {
				buf = append(buf, '\n')
			}
			dst.Write(buf)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
