package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/device"
	"github.com/goccl/goccl/kernels"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/transport/ib"
)

// benchConfig is what `goccl bench` measures; the flags follow nccl-tests.
type benchConfig struct {
	minBytes, maxBytes int64
	factor             int64
	op                 string
	dtype              reduceop.DType
	redop              reduceop.Op
	root               int
	algos              []algo.Algorithm // "" = the cost model's choice
	ranks              int
	transport          string
	warmup, iters      int
	check              bool
	format             string
	plot               string
	quiet              bool // no progress on stderr
	cpuprofile         string
	mismatchCheck      bool
	cpuBind            bool
	units              commslog.Units
	device             string // host, hostsim or cuda (benchdev.go)
	parts              int    // -op allreduce over this many slices with AllReduceCoalesced; 1: AllReduce
	peerLinks          string // the transport each rank's peers are reached over (benchWorker), for the header
	// join: this process is one rank of a job a launcher started (-join);
	// nSet: -n was given, so the job's size must match it.
	join, nSet bool
}

// benchOps maps -op names to the collective they run and the commslog op
// name that fixes the nccl-tests bus factor.
var benchOps = map[string]struct {
	coll algo.Collective
	log  string
}{
	"allreduce":     {algo.AllReduce, commslog.AllReduce},
	"allgather":     {algo.AllGather, commslog.AllGatherIntoTensor},
	"reducescatter": {algo.ReduceScatter, commslog.ReduceScatterTensor},
	"broadcast":     {algo.Broadcast, commslog.Broadcast},
	"reduce":        {algo.Reduce, commslog.Reduce},
	"alltoall":      {algo.AllToAll, commslog.AllToAllSingle},
	"gather":        {algo.Gather, commslog.Gather},
	"scatter":       {algo.Scatter, commslog.Scatter},
	"sendrecv":      {0, commslog.Send},
	// onebit is DeepSpeed's compressed allreduce (package onebit); its
	// busbw uses allreduce's factor, so it compares with -op allreduce.
	"onebit": {0, commslog.AllReduce},
}

// benchOpNames lists benchOps in the order -op's help names them.
var benchOpNames = []string{"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter", "sendrecv", "onebit"}

// names is xs's names, comma-separated.
func names[T fmt.Stringer](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = x.String()
	}
	return strings.Join(s, ", ")
}

func algoNames(xs []algo.Algorithm) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// benchAlgorithms lists the algorithm families of every -op, in
// algo.Algorithms order.
func benchAlgorithms() []algo.Algorithm {
	var out []algo.Algorithm
	for _, a := range algo.Algorithms {
		for _, op := range benchOpNames {
			if slices.Contains(opAlgorithms(op), a) {
				out = append(out, a)
				break
			}
		}
	}
	return out
}

// opAlgorithms lists the algorithm families that implement -op op.
func opAlgorithms(op string) []algo.Algorithm {
	var out []algo.Algorithm
	if coll := benchOps[op].coll; coll != 0 {
		for _, a := range algo.Algorithms {
			if algo.Implements(a, coll) {
				out = append(out, a)
			}
		}
	}
	return out
}

const benchUsage = `usage: goccl bench [flags]

Measures one collective across ranks, as nccl-tests does: for each message
size from -b to -e, -w warm-up calls, then -iters calls timed back to back.
The table shows their average time, algbw (size / time) and busbw (algbw
scaled to the bytes each rank's link carries, comparable across rank
counts). -check validates one more call, untimed, after the timed ones
against a sequential reference (the #wrong column), so it does not change
the figures. By default the ranks are processes of this binary over TCP
loopback, one per CPU this process may use (at least 2). With -join the
process is instead one rank of a job a launcher started, which is how it
runs across hosts:

  goccl run -nnodes 2 -node-rank 0 -n 1 -master-addr A -master-port 29500 -- goccl bench -join -transport ib
  goccl run -nnodes 2 -node-rank 1 -n 1 -master-addr A -master-port 29500 -- goccl bench -join -transport ib

flags:
`

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult = 1 << 10
	case strings.HasSuffix(s, "M"), strings.HasSuffix(s, "m"):
		mult = 1 << 20
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "g"):
		mult = 1 << 30
	}
	if mult > 1 {
		s = s[:len(s)-1]
	}
	v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSuffix(s, "B"), "b"), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size %q (want a number with an optional K, M or G suffix)", s)
	}
	return v * mult, nil
}

func parseBenchFlags(args []string, stderr io.Writer) (*benchConfig, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	var cfg benchConfig
	minB := fs.String("b", "8", "smallest message size in bytes (suffix K, M or G)")
	maxB := fs.String("e", "64M", "largest message size in bytes (suffix K, M or G)")
	fs.Int64Var(&cfg.factor, "f", 2, "multiply the size by this factor between steps")
	fs.StringVar(&cfg.op, "op", "allreduce", "collective: "+strings.Join(benchOpNames[:len(benchOpNames)-2], ", ")+
		", sendrecv (each rank sends to the next), onebit (DeepSpeed's 1-bit compressed allreduce, float32; package onebit)")
	dtype := fs.String("dtype", "float32", "element type: "+names(reduceop.DTypes))
	redop := fs.String("redop", "sum", "reduction: "+names(reduceop.Ops)+
		" (avg on floats and complex; band/bor/bxor on integers and bool; min/max not on complex; sum/prod/avg not on bool; "+
		"with -device hostsim or cuda, reductions on "+names(kernels.DTypes)+" only)")
	fs.IntVar(&cfg.root, "root", 0, "root rank for broadcast, reduce, gather, scatter")
	algoFlag := fs.String("algo", "", "algorithm family: "+algoNames(benchAlgorithms())+"; all: every one that implements -op, one after the other; empty: the cost model picks per size")
	fs.IntVar(&cfg.ranks, "n", defaultRanks(), "number of ranks: by default one per CPU this process may use, at least 2")
	fs.StringVar(&cfg.transport, "transport", "tcp", "transport: tcp (one process per rank over loopback), shm (one process per rank over shared memory), "+
		"ib (one process per rank over InfiniBand/RoCE verbs: a goccl built with -tags ibverbs and an active port), "+
		"auto (one process per rank, over what Init picks by default: shm on one host) or mem (ranks as goroutines in this process)")
	fs.BoolVar(&cfg.join, "join", false, "be one rank of a job a launcher started (goccl run -nnodes, srun, mpirun, torchrun) instead of starting the ranks: "+
		"every rank runs the same goccl bench -join command, over -transport, and -n is the job's size; rank 0 prints the table")
	fs.IntVar(&cfg.warmup, "w", 5, "warm-up iterations per size")
	fs.IntVar(&cfg.iters, "iters", 20, "timed iterations per size")
	fs.BoolVar(&cfg.check, "check", false, "after the timed calls, validate one more against a sequential reference (#wrong column); the figures do not change")
	fs.StringVar(&cfg.format, "format", "table", "output format: table, csv or json")
	fs.StringVar(&cfg.plot, "plot", "", "write busbw against size to this SVG file")
	fs.BoolVar(&cfg.mismatchCheck, "mismatch-check", true, "send the collective fingerprint that catches ranks that disagree (off: measure its cost)")
	units := fs.String("units", "GBps", "bandwidth units: GBps (nccl-tests) or gbps (DeepSpeed's Gbit/s)")
	fs.BoolVar(&cfg.quiet, "q", false, "no progress indicator on stderr")
	fs.BoolVar(&cfg.cpuBind, "cpu-bind", true, "with one process per rank (-transport tcp, shm or auto), bind each rank to an equal share of the CPUs when there are at least as many CPUs as ranks")
	fs.StringVar(&cfg.device, "device", "host", "where the buffers live: host (Go slices), hostsim (a fake device on host memory, staged and IPC paths as on a GPU) or cuda (the local rank's GPU; needs a goccl built with -tags cuda); GOCCL_DEVICE_IPC=0 stages same-host device messages instead of IPC")
	fs.IntVar(&cfg.parts, "parts", 1, "with -op allreduce: cut each rank's buffer into this many slices and reduce them with AllReduceCoalesced, as a framework hands over its list of gradients")
	fs.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write each rank's CPU profile (go tool pprof): rank 0's to this file, rank r's to this file's name followed by .r")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (goccl bench takes flags only)", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) { cfg.nSet = cfg.nSet || f.Name == "n" })
	if cfg.join && cfg.transport == "mem" {
		return nil, errors.New("-join runs one rank per process: -transport mem cannot span them")
	}
	var err error
	if cfg.minBytes, err = parseSize(*minB); err != nil {
		return nil, fmt.Errorf("-b: %w", err)
	}
	if cfg.maxBytes, err = parseSize(*maxB); err != nil {
		return nil, fmt.Errorf("-e: %w", err)
	}
	if cfg.maxBytes < cfg.minBytes {
		return nil, fmt.Errorf("-e %d is smaller than -b %d", cfg.maxBytes, cfg.minBytes)
	}
	if cfg.factor < 2 {
		return nil, fmt.Errorf("-f must be at least 2, got %d", cfg.factor)
	}
	if cfg.ranks < 1 {
		return nil, fmt.Errorf("-n must be at least 1, got %d", cfg.ranks)
	}
	if cfg.iters < 1 || cfg.warmup < 0 {
		return nil, fmt.Errorf("-iters must be >= 1 and -w >= 0")
	}
	if cfg.parts < 1 || cfg.parts > 1 && (cfg.op != "allreduce" || cfg.device != "host") {
		return nil, fmt.Errorf("-parts %d: want 1, or more with -op allreduce on -device host", cfg.parts)
	}
	if _, ok := benchOps[cfg.op]; !ok {
		return nil, fmt.Errorf("unknown -op %q (want one of %s)", cfg.op, strings.Join(benchOpNames, ", "))
	}
	if cfg.dtype, err = reduceop.ParseDType(*dtype); err != nil {
		return nil, fmt.Errorf("unknown -dtype %q (want one of %s)", *dtype, names(reduceop.DTypes))
	}
	if cfg.redop, err = reduceop.ParseOp(*redop); err != nil {
		return nil, fmt.Errorf("unknown -redop %q (want one of %s)", *redop, names(reduceop.Ops))
	}
	if needsOp(cfg.op) {
		if err := reduceop.Check(cfg.redop, cfg.dtype); err != nil {
			return nil, fmt.Errorf("-redop %v on -dtype %v: %w", cfg.redop, cfg.dtype, err)
		}
	}
	if err := cfg.checkRanks(); err != nil && (!cfg.join || cfg.nSet) {
		// With -join and no -n, the job's size is known after Init.
		return nil, err
	}
	if cfg.op == "onebit" && cfg.dtype != reduceop.Float32 {
		return nil, errors.New("-op onebit works on float32")
	}
	valid := opAlgorithms(cfg.op)
	switch *algoFlag {
	case "":
		cfg.algos = []algo.Algorithm{""}
	case "all":
		cfg.algos = valid
		if len(cfg.algos) == 0 {
			cfg.algos = []algo.Algorithm{""}
		}
	default:
		choices := "it has one algorithm: leave -algo out"
		if len(valid) > 0 {
			choices = "want " + algoNames(valid) + ", all, or no -algo for the cost model's choice"
		}
		a, err := algo.ParseAlgorithm(*algoFlag)
		if err != nil {
			return nil, fmt.Errorf("unknown -algo %q (for -op %s: %s)", *algoFlag, cfg.op, choices)
		}
		if !algo.Implements(a, benchOps[cfg.op].coll) {
			return nil, fmt.Errorf("-algo %s does not implement %s (%s)", a, cfg.op, choices)
		}
		cfg.algos = []algo.Algorithm{a}
	}
	if cfg.units, err = commslog.ParseUnits(*units); err != nil {
		return nil, err
	}
	switch cfg.transport {
	case "tcp", "shm", "auto", "mem":
	case "ib":
		// Here, before any rank starts: each would fail alike.
		if err := ib.Probe(""); errors.Is(err, ib.ErrNotBuilt) {
			return nil, errors.New("-transport ib: this goccl is built without InfiniBand verbs: build it with `go build -tags ibverbs ./cmd/goccl` (cgo, libibverbs-dev)")
		} else if err != nil {
			return nil, fmt.Errorf("-transport ib: no usable RDMA device here (GOCCL_IB_HCA=%q): %w", os.Getenv(ib.EnvHCA), err)
		}
	default:
		return nil, fmt.Errorf("unknown -transport %q (tcp, shm, ib, auto or mem)", cfg.transport)
	}
	switch cfg.device {
	case "host", "hostsim", "cuda":
	default:
		return nil, fmt.Errorf("unknown -device %q (host, hostsim or cuda)", cfg.device)
	}
	if cfg.device != "host" && needsOp(cfg.op) {
		if err := device.CheckReduce(cfg.redop, cfg.dtype); err != nil {
			return nil, fmt.Errorf("-redop %v on -dtype %v with -device %s: %w", cfg.redop, cfg.dtype, cfg.device, err)
		}
	}
	switch cfg.format {
	case "table", "csv", "json":
	default:
		return nil, fmt.Errorf("unknown -format %q (table, csv or json)", cfg.format)
	}
	return &cfg, nil
}

// checkRanks checks the flags that depend on the number of ranks.
func (cfg *benchConfig) checkRanks() error {
	if cfg.root < 0 || cfg.root >= cfg.ranks {
		return fmt.Errorf("-root %d out of range [0,%d)", cfg.root, cfg.ranks)
	}
	if cfg.op == "sendrecv" && cfg.ranks < 2 {
		return errors.New("-op sendrecv needs -n 2 or more")
	}
	return nil
}

// cpusAvailable is the number of CPUs this process may run on: its
// affinity mask (taskset, cgroups' cpusets, Slurm), not every CPU of the
// machine.
func cpusAvailable() int {
	if cpus := allowedCPUs(); len(cpus) > 0 {
		return len(cpus)
	}
	return runtime.NumCPU()
}

// defaultRanks is -n's default: a rank per available CPU, as many ranks as
// the machine runs at once, and at least 2, so that there is communication
// to measure.
func defaultRanks() int { return max(2, cpusAvailable()) }

// plural is "1 CPU", "2 CPUs".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func needsOp(op string) bool {
	return op == "allreduce" || op == "reducescatter" || op == "reduce"
}

// result is one row of the table.
type result struct {
	Bytes  int64   `json:"size"`
	Count  int64   `json:"count"`
	Type   string  `json:"type"`
	Redop  string  `json:"redop"`
	Root   int     `json:"root"`
	Algo   string  `json:"algo"`
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_GBps"`
	BusBW  float64 `json:"busbw_GBps"`
	// Wrong is the number of wrong elements -check found, nil (null in
	// json, empty in csv) without -check.
	Wrong     *int64 `json:"wrong"`
	Ranks     int    `json:"ranks"`
	Op        string `json:"op"`
	Transport string `json:"transport"`
	// SentPerRank is the payload bytes one rank sends per call, on average.
	SentPerRank int64 `json:"sent_per_rank"`
}

func (cfg *benchConfig) sizes() []int64 {
	var out []int64
	esz := int64(cfg.dtype.Size())
	for b := cfg.minBytes; b <= cfg.maxBytes; b *= cfg.factor {
		// Round down to whole elements, and for blocked collectives to
		// whole blocks per rank, as nccl-tests does.
		unit := esz
		switch cfg.op {
		case "allgather", "reducescatter", "alltoall", "gather", "scatter":
			unit = esz * int64(cfg.ranks)
		}
		out = append(out, b/unit*unit)
		if b == 0 {
			break
		}
	}
	return out
}

// benchMain runs `goccl bench`.
func benchMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseBenchFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "goccl bench:", err)
		return 2
	}
	if os.Getenv(benchWorkerEnv) == "" && !cfg.join {
		if cpus := cpusAvailable(); cfg.ranks > cpus {
			fmt.Fprintf(stderr, "goccl bench: %d ranks on %s: ranks take turns on the CPUs, so the figures are lower than with a CPU per rank\n", cfg.ranks, plural(cpus, "CPU"))
		}
	}
	var results []result
	switch {
	case cfg.transport == "mem":
		results, err = benchLocal(ctx, cfg, stderr)
	case os.Getenv(benchWorkerEnv) == "" && !cfg.join:
		// The parent of the rank processes: rank 0 prints the table.
		err = benchProcesses(ctx, args, cfg, stdout, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "goccl bench:", err)
			return 1
		}
		return 0
	default:
		var printer bool
		results, printer, err = benchWorker(ctx, cfg, stdout, stderr)
		if err == nil && !printer {
			return 0
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "goccl bench:", err)
		return 1
	}
	if err := report(stdout, cfg, results); err != nil {
		fmt.Fprintln(stderr, "goccl bench:", err)
		return 1
	}
	if cfg.plot != "" {
		if err := plotResults(cfg.plot, cfg, results); err != nil {
			fmt.Fprintln(stderr, "goccl bench: plot:", err)
			return 1
		}
	}
	for _, r := range results {
		if r.Wrong != nil && *r.Wrong > 0 {
			return 1
		}
	}
	return 0
}

// benchLocal runs every rank as a goroutine over transport/mem.
func benchLocal(ctx context.Context, cfg *benchConfig, stderr io.Writer) ([]result, error) {
	comms, err := goccl.NewLocal(cfg.ranks, goccl.WithMismatchCheck(cfg.mismatchCheck))
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	var (
		wg      sync.WaitGroup
		results []result
		errs    = make([]error, len(comms))
	)
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var progress io.Writer
			if i == 0 && !cfg.quiet {
				progress = stderr
			}
			res, err := benchRank(ctx, c, cfg, progress)
			errs[i] = err
			if i == 0 {
				results = res
			}
		}()
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// benchRank is what one rank does: for every algorithm and size, warm up,
// time iters calls, then check one more call if asked, and agree with the
// other ranks on the average time and the number of wrong elements. Every
// rank returns the same rows.
func benchRank(ctx context.Context, c *goccl.Comm, cfg *benchConfig, progress io.Writer) ([]result, error) {
	var rows []result
	sizes := cfg.sizes()
	total := len(sizes) * len(cfg.algos)
	done := 0
	prog := newProgress(progress)
	var bd *benchDevice
	if cfg.device != "host" {
		var err error
		if bd, err = openBenchDevice(cfg.device); err != nil {
			return nil, err
		}
		defer bd.Close()
	}
	for _, a := range cfg.algos {
		if err := c.SetAlgorithm(a); err != nil {
			return nil, err
		}
		for _, size := range sizes {
			row, err := benchOne(ctx, c, cfg, bd, a, size)
			if err != nil {
				return nil, fmt.Errorf("%s %s %d bytes: %w", cfg.op, a, size, err)
			}
			rows = append(rows, row)
			done++
			prog.update(done, total)
		}
	}
	prog.finish()
	return rows, nil
}

// progress shows how far a bench that has run a while has got. On a
// terminal one line is rewritten in place with \r every second; anywhere
// else (a file, a pipe, a CI log) whole lines are written, every 10
// seconds, so that the log holds no \r.
type progress struct {
	w           io.Writer
	tty         bool
	after       time.Duration // quiet until the bench has run this long
	every       time.Duration // between updates
	began, last time.Time
	shown       bool
}

// newProgress returns the progress shown on w, or nil (which shows
// nothing) if w is nil.
func newProgress(w io.Writer) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, tty: isTerminal(w), after: 3 * time.Second, every: 10 * time.Second, began: time.Now()}
	if p.tty {
		p.every = time.Second
	}
	return p
}

// isTerminal reports whether w is a terminal: a character device (or
// /dev/null, which is one too and where a \r harms nothing), not a file
// or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func (p *progress) update(done, total int) {
	if p == nil {
		return
	}
	now := time.Now()
	if now.Sub(p.began) < p.after || (p.shown && now.Sub(p.last) < p.every) {
		return
	}
	p.last, p.shown = now, true
	msg := fmt.Sprintf("goccl bench: %d/%d sizes done (%s)", done, total, now.Sub(p.began).Round(time.Second))
	if p.tty {
		fmt.Fprintf(p.w, "\r%s   ", msg)
	} else {
		fmt.Fprintln(p.w, msg)
	}
}

// finish ends the line that update rewrote on a terminal.
func (p *progress) finish() {
	if p != nil && p.tty && p.shown {
		fmt.Fprintln(p.w)
	}
}

// benchTrace, set by tests, hears what each rank does around its timed
// loop: "timed start", "call", "refill", "check", "timed end".
var benchTrace func(rank int, ev string)

func benchEvent(rank int, ev string) {
	if benchTrace != nil {
		benchTrace(rank, ev)
	}
}

func benchOne(ctx context.Context, c *goccl.Comm, cfg *benchConfig, bd *benchDevice, a algo.Algorithm, size int64) (result, error) {
	n := c.Size()
	esz := int64(cfg.dtype.Size())
	b := newBenchBufs(cfg, c.Rank(), n, int(size/esz))
	if bd != nil {
		if err := b.onDevice(bd); err != nil {
			return result{}, fmt.Errorf("-device %s: %w", cfg.device, err)
		}
		defer b.free()
		if err := b.reset(ctx); err != nil {
			return result{}, err
		}
	}
	for i := 0; i < cfg.warmup; i++ {
		if err := b.run(ctx, c); err != nil {
			return result{}, err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return result{}, err
	}
	// The timed loop is the calls alone, back to back: -check does not
	// reset or validate inside it, so the figures are the same with and
	// without -check (TestBenchCheckDoesNotChangeTiming).
	sent0 := c.Traffic().Total().SentBytes
	benchEvent(b.rank, "timed start")
	start := time.Now()
	for i := 0; i < cfg.iters; i++ {
		if err := b.run(ctx, c); err != nil {
			return result{}, err
		}
	}
	elapsed := time.Since(start)
	benchEvent(b.rank, "timed end")
	sent := float64(c.Traffic().Total().SentBytes-sent0) / float64(cfg.iters)
	// -check validates one more call, untimed, as nccl-tests does: the
	// inputs are refilled first (the in-place collectives left the sums of
	// every earlier call in them), then the result is compared with the
	// sequential reference. The barrier keeps a rank that finished its
	// timed calls first from refilling while another's are still timed:
	// ranks that share CPUs (-transport mem, or more ranks than CPUs) would
	// otherwise time the refill too (10-40% on a loaded 2-core machine).
	var wrong int64
	if cfg.check {
		if err := c.Barrier(ctx); err != nil {
			return result{}, err
		}
		if err := b.reset(ctx); err != nil {
			return result{}, err
		}
		if err := b.run(ctx, c); err != nil {
			return result{}, err
		}
		var err error
		if wrong, err = b.wrong(ctx); err != nil {
			return result{}, err
		}
	}
	// Agree on the figures: the mean time and bytes sent over ranks (as
	// nccl-tests reports time) and the total of wrong elements.
	agg := []float64{elapsed.Seconds() / float64(cfg.iters), float64(wrong), sent}
	if err := c.AllReduce(ctx, agg, reduceop.Sum); err != nil {
		return result{}, err
	}
	sec := agg[0] / float64(n)
	algbw := 0.0
	if sec > 0 {
		algbw = float64(size) / sec / 1e9
	}
	name := string(a)
	if name == "" {
		name = "auto:" + string(c.AlgorithmFor(benchOps[cfg.op].coll, int(size)))
	}
	if be := b.backend(c); be != "goccl" && cfg.parts <= 1 {
		name = be // the backend ran it (GOCCL_BACKEND, with -join under its launcher; NCCL for -device cuda)
	}
	if cfg.parts > 1 {
		name += fmt.Sprintf("/%d parts", cfg.parts)
	}
	switch cfg.op {
	case "sendrecv":
		name = "p2p"
	case "onebit":
		name = "onebit"
	}
	redop := "none"
	if needsOp(cfg.op) {
		redop = cfg.redop.String()
	}
	root := -1
	switch cfg.op {
	case "broadcast", "reduce", "gather", "scatter":
		root = cfg.root
	}
	row := result{
		Bytes: size, Count: size / esz, Type: cfg.dtype.String(), Redop: redop, Root: root, Algo: name,
		TimeUS: sec * 1e6, AlgBW: algbw, BusBW: algbw * commslog.BusFactor(benchOps[cfg.op].log, n),
		Ranks: n, Op: cfg.op, Transport: cfg.transport, SentPerRank: int64(agg[2] / float64(n)),
	}
	if cfg.check {
		w := int64(agg[1])
		row.Wrong = &w
	}
	return row, nil
}

// wrongText is the #wrong cell: the count with -check, else empty.
func (r result) wrongText() string {
	if r.Wrong == nil {
		return ""
	}
	return strconv.FormatInt(*r.Wrong, 10)
}

// unitsKey is the units as they end a csv column name: GBps or Gbps.
func unitsKey(u commslog.Units) string {
	if u == commslog.Gbps {
		return "Gbps"
	}
	return "GBps"
}

// report writes the rows in cfg.format. The table and the csv show
// bandwidths in -units; json always in GB/s, as its keys say.
func report(w io.Writer, cfg *benchConfig, rows []result) error {
	switch cfg.format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "csv":
		k := unitsKey(cfg.units)
		fmt.Fprintf(w, "op,ranks,transport,size,count,type,redop,root,algo,time_us,algbw_%s,busbw_%s,wrong,sent_per_rank\n", k, k)
		for _, r := range rows {
			fmt.Fprintf(w, "%s,%d,%s,%d,%d,%s,%s,%d,%s,%.2f,%.4f,%.4f,%s,%d\n", r.Op, r.Ranks, r.Transport,
				r.Bytes, r.Count, r.Type, r.Redop, r.Root, r.Algo, r.TimeUS,
				cfg.units.Convert(r.AlgBW*1e9), cfg.units.Convert(r.BusBW*1e9), r.wrongText(), r.SentPerRank)
		}
		return nil
	}
	fmt.Fprintf(w, "# goccl bench: %s, %d ranks, transport %s, %d warm-up + %d timed iterations per size\n",
		cfg.op, cfg.ranks, cfg.transport, cfg.warmup, cfg.iters)
	if cfg.peerLinks != "" {
		fmt.Fprintf(w, "# peers over: %s\n", cfg.peerLinks)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	u := cfg.units.String()
	fmt.Fprintf(tw, "size\tcount\ttype\tredop\troot\talgo\ttime(us)\talgbw(%s)\tbusbw(%s)\t#wrong\tsent/rank(B)\t\n", u, u)
	for _, r := range rows {
		wrong := "N/A"
		if r.Wrong != nil {
			wrong = r.wrongText()
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%.1f\t%.3f\t%.3f\t%s\t%d\t\n",
			r.Bytes, r.Count, r.Type, r.Redop, r.Root, r.Algo, r.TimeUS,
			cfg.units.Convert(r.AlgBW*1e9), cfg.units.Convert(r.BusBW*1e9), wrong, r.SentPerRank)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// nccl-tests' "Avg bus bandwidth", one per algorithm: an average over
	// several algorithms would mean nothing. The cost model's choices
	// ("auto:ring", "auto:tree") are one run, averaged together.
	type avg struct {
		name string
		sum  float64
		n    int
	}
	var avgs []*avg
	byName := map[string]*avg{}
	for _, r := range rows {
		name := r.Algo
		if strings.HasPrefix(name, "auto:") {
			name = "auto"
		}
		a := byName[name]
		if a == nil {
			a = &avg{name: name}
			byName[name] = a
			avgs = append(avgs, a)
		}
		a.sum += r.BusBW
		a.n++
	}
	for _, a := range avgs {
		label := ""
		if len(avgs) > 1 {
			label = " " + a.name
		}
		fmt.Fprintf(w, "# avg busbw%s: %.3f %s\n", label, cfg.units.Convert(a.sum/float64(a.n)*1e9), u)
	}
	return nil
}
