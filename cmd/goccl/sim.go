package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/commslog"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/sim"
)

const simUsage = `usage: goccl sim [flags]

Runs the real collective algorithms on a simulated cluster: every rank is a
goroutine, and a discrete-event scheduler moves a virtual clock. A message
of m bytes costs alpha + m*beta of its link, links are shared by the
messages that cross them at once, and reducing m bytes costs m*gamma. The
table has the columns of 'goccl bench', with time in virtual microseconds.

The ranks live on -hosts hosts in contiguous blocks (8 ranks per host by
default). Within a host each rank has its own NVLink-class port (defaults:
1 us, 200 GB/s each way); between hosts a message crosses its host's NIC
and the other host's (defaults: 5 us, 100 Gbit/s), and with -leaf the two
leaf switches' uplinks of a two-level fat tree. Reductions default to
500 GB/s. Times take a unit (s, ms, us, ns, ps); -beta and -beta-intra take
a time per byte or a bandwidth (100Gbit/s, 12.5GB/s).

Without -check no data moves: sends carry lengths and reductions are
charged, so thousands of ranks and gigabytes fit in this process. With
-check every rank holds real int64 data and each result is compared with a
sequential reference (#wrong).

  goccl sim -n 1024 -hosts 128 -op allreduce -algo all -b 8 -e 1G
  goccl sim -n 8 -op allreduce -algo ring -b 64 -v

flags:
`

// simConfig is what `goccl sim` runs.
type simConfig struct {
	bench    benchConfig // sizes, op, algorithms, units, format, plot
	topo     sim.Topology
	gamma    float64
	verbose  bool
	trace    string
	elemSize int
}

// parseTime parses a duration with a unit (s, ms, us, µs, ns, ps) into
// seconds, keeping fractions of a nanosecond.
func parseTime(s string) (float64, error) {
	units := []struct {
		suffix string
		scale  float64
	}{{"ps", 1e-12}, {"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}}
	if s == "0" {
		return 0, nil
	}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || math.IsInf(f, 0) {
				break
			}
			return f * u.scale, nil
		}
	}
	return 0, fmt.Errorf("bad time %q (want a number and a unit: s, ms, us, ns or ps)", s)
}

// parseBeta parses seconds per byte, as a time ("80ps") or a bandwidth
// ("100Gbit/s", "12.5GB/s", "400Mbit/s").
func parseBeta(s string) (float64, error) {
	units := []struct {
		suffix string
		bytes  float64 // per second, per unit
	}{{"Tbit/s", 1e12 / 8}, {"Gbit/s", 1e9 / 8}, {"Mbit/s", 1e6 / 8}, {"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || math.IsInf(f, 0) {
				return 0, fmt.Errorf("bad bandwidth %q", s)
			}
			return 1 / (f * u.bytes), nil
		}
	}
	b, err := parseTime(s)
	if err != nil {
		return 0, fmt.Errorf("bad beta %q (want a time per byte such as 80ps, or a bandwidth such as 100Gbit/s or 12.5GB/s)", s)
	}
	return b, nil
}

func parseSimFlags(args []string, stderr io.Writer) (*simConfig, error) {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simUsage)
		fs.PrintDefaults()
	}
	var cfg simConfig
	b := &cfg.bench
	minB := fs.String("b", "8", "smallest message size in bytes (suffix K, M or G)")
	maxB := fs.String("e", "", "largest message size in bytes (suffix K, M or G); default 64M, or -b with -v")
	fs.Int64Var(&b.factor, "f", 2, "multiply the size by this factor between steps")
	var ops []string
	for _, op := range benchOpNames {
		if benchOps[op].coll != 0 {
			ops = append(ops, op)
		}
	}
	fs.StringVar(&b.op, "op", "allreduce", "collective: "+strings.Join(ops, ", ")+" (root 0)")
	dtype := fs.String("dtype", "float32", "element type, for the element size and the count column: "+names(reduceop.DTypes))
	algoFlag := fs.String("algo", "all", "algorithm family: "+algoNames(benchAlgorithms())+"; all: every one that implements -op; empty: algo.SelectTopo's choice per size for the simulated hosts")
	fs.IntVar(&b.ranks, "n", 8, "number of ranks")
	hosts := fs.Int("hosts", 0, "number of hosts; 0: one per 8 ranks")
	alpha := fs.String("alpha", "5us", "latency of a message between hosts")
	beta := fs.String("beta", "100Gbit/s", "time per byte, or bandwidth, of a NIC (each way)")
	alphaIntra := fs.String("alpha-intra", "1us", "latency of a message within a host")
	betaIntra := fs.String("beta-intra", "200GB/s", "time per byte, or bandwidth, of a rank's port within a host (each way)")
	gamma := fs.String("gamma", "2ps", "time to reduce one byte (2ps = 500 GB/s)")
	fs.IntVar(&cfg.topo.NICs, "nics", 1, "NICs per host; rank i of a host uses NIC i mod nics")
	fs.IntVar(&cfg.topo.HostsPerLeaf, "leaf", 0, "hosts per leaf switch of a two-level fat tree; 0: one switch, full bandwidth")
	fs.Float64Var(&cfg.topo.Oversubscription, "oversub", 1, "with -leaf, the leaf uplinks' oversubscription factor")
	fs.BoolVar(&b.check, "check", false, "move real int64 data and compare each result with a sequential reference (#wrong); small runs only")
	fs.StringVar(&b.format, "format", "table", "output format: table, csv or json")
	fs.StringVar(&b.plot, "plot", "", "write busbw against size to this SVG (or PNG, PDF) file: one line per algorithm, dashed beside it its cost formula (algo.CostTopo: the ranks a host and both levels' alpha and beta)")
	fs.StringVar(&cfg.trace, "trace", "", "write every run's sends, receives and reductions to this file in Chrome trace-event JSON (one process per run, one row per rank)")
	fs.BoolVar(&cfg.verbose, "v", false, "print every run's messages step by step, as the algorithms' doc comments draw them, with their virtual times")
	units := fs.String("units", "GBps", "bandwidth units: GBps (nccl-tests) or gbps (Gbit/s)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (goccl sim takes flags only)", fs.Args())
	}
	var err error
	if b.minBytes, err = parseSize(*minB); err != nil {
		return nil, fmt.Errorf("-b: %w", err)
	}
	switch {
	case *maxB != "":
		if b.maxBytes, err = parseSize(*maxB); err != nil {
			return nil, fmt.Errorf("-e: %w", err)
		}
	case cfg.verbose:
		b.maxBytes = b.minBytes
	default:
		b.maxBytes = 64 << 20
	}
	if b.maxBytes < b.minBytes {
		return nil, fmt.Errorf("-e %d is smaller than -b %d", b.maxBytes, b.minBytes)
	}
	if b.factor < 2 {
		return nil, fmt.Errorf("-f must be at least 2, got %d", b.factor)
	}
	if b.ranks < 1 {
		return nil, fmt.Errorf("-n must be at least 1, got %d", b.ranks)
	}
	coll := benchOps[b.op].coll
	if coll == 0 {
		return nil, fmt.Errorf("unknown -op %q (want one of %s)", b.op, strings.Join(ops, ", "))
	}
	if b.dtype, err = reduceop.ParseDType(*dtype); err != nil {
		return nil, fmt.Errorf("unknown -dtype %q (want one of %s)", *dtype, names(reduceop.DTypes))
	}
	cfg.elemSize = b.dtype.Size()
	if b.check {
		b.dtype, cfg.elemSize = reduceop.Int64, 8
	}
	b.redop = reduceop.Sum
	valid := opAlgorithms(b.op)
	switch *algoFlag {
	case "":
		b.algos = []algo.Algorithm{""}
	case "all":
		b.algos = valid
	default:
		for name := range strings.SplitSeq(*algoFlag, ",") {
			a, err := algo.ParseAlgorithm(name)
			if err != nil || !algo.Implements(a, coll) {
				return nil, fmt.Errorf("-algo %q does not implement %s (want %s, all, or empty for algo.SelectTopo's choice)", name, b.op, algoNames(valid))
			}
			b.algos = append(b.algos, a)
		}
	}
	if b.units, err = commslog.ParseUnits(*units); err != nil {
		return nil, err
	}
	switch b.format {
	case "table", "csv", "json":
	default:
		return nil, fmt.Errorf("unknown -format %q (table, csv or json)", b.format)
	}
	t := &cfg.topo
	t.Hosts = *hosts
	if t.Hosts == 0 {
		t.Hosts = (b.ranks + 7) / 8
	}
	if t.Hosts < 1 || t.Hosts > b.ranks {
		return nil, fmt.Errorf("-hosts %d out of range [1,%d]", t.Hosts, b.ranks)
	}
	for _, f := range []struct {
		name string
		dst  *float64
		val  string
		fn   func(string) (float64, error)
	}{
		{"-alpha", &t.Inter.Alpha, *alpha, parseTime},
		{"-beta", &t.Inter.Beta, *beta, parseBeta},
		{"-alpha-intra", &t.Intra.Alpha, *alphaIntra, parseTime},
		{"-beta-intra", &t.Intra.Beta, *betaIntra, parseBeta},
		{"-gamma", &cfg.gamma, *gamma, parseTime},
	} {
		if *f.dst, err = f.fn(f.val); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if t.NICs < 1 || t.HostsPerLeaf < 0 || !(t.Oversubscription >= 1) {
		return nil, errors.New("-nics must be at least 1, -leaf at least 0 and -oversub at least 1")
	}
	b.transport = "sim"
	b.iters = 1
	return &cfg, nil
}

// modelTopology is the simulated machine as algo's two-level model sees
// it: n/hosts ranks a host when the hosts hold equal blocks and have one
// NIC each behind one switch, else one rank a host (the host-blind model
// under the inter-host constants).
func modelTopology(cfg *simConfig) algo.Topology {
	t, n := cfg.topo, cfg.bench.ranks
	l := 1
	if n%t.Hosts == 0 && t.NICs <= 1 && (t.HostsPerLeaf == 0 || t.HostsPerLeaf >= t.Hosts) {
		l = n / t.Hosts
	}
	return algo.Topology{RanksPerHost: l, Intra: algo.Level{Alpha: t.Intra.Alpha, Beta: t.Intra.Beta},
		Inter: algo.Level{Alpha: t.Inter.Alpha, Beta: t.Inter.Beta}, Gamma: cfg.gamma}
}

// simRun is one simulated row with what -plot, -trace and -v need.
type simRun struct {
	row    result
	model  float64 // algo.CostTopo's seconds on modelTopology
	events []sim.Event
}

// simMain runs `goccl sim`.
func simMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseSimFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "goccl sim:", err)
		return 2
	}
	runs, err := simAll(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "goccl sim:", err)
		return 1
	}
	rows := make([]result, len(runs))
	for i, r := range runs {
		rows[i] = r.row
	}
	if err := simReport(stdout, cfg, rows); err != nil {
		fmt.Fprintln(stderr, "goccl sim:", err)
		return 1
	}
	if cfg.trace != "" {
		if err := writeSimTrace(cfg, runs); err != nil {
			fmt.Fprintln(stderr, "goccl sim: -trace:", err)
			return 1
		}
	}
	if cfg.bench.plot != "" {
		if err := plotSim(cfg.bench.plot, cfg, runs); err != nil {
			fmt.Fprintln(stderr, "goccl sim: -plot:", err)
			return 1
		}
	}
	return 0
}

// simAll simulates every algorithm at every size; with -v it prints each
// run's transcript to out as it goes.
func simAll(ctx context.Context, cfg *simConfig, out io.Writer) ([]simRun, error) {
	b := &cfg.bench
	coll, n := benchOps[b.op].coll, b.ranks
	record := cfg.verbose || cfg.trace != ""
	if b.check && int64(n)*b.maxBytes > 1<<30 {
		return nil, fmt.Errorf("-check holds every rank's data in memory: %d ranks of %d bytes is over 1 GiB", n, b.maxBytes)
	}
	var runs []simRun
	for _, a := range b.algos {
		for _, size := range b.sizes() {
			name, run := string(a), a
			if a == "" {
				run = algo.SelectTopo(coll, int(size), n, modelTopology(cfg))
				name = "auto:" + string(run)
			}
			scfg := sim.Config{Ranks: n, ElemSize: cfg.elemSize, Topology: cfg.topo, Gamma: cfg.gamma, SizeOnly: !b.check, Record: record}
			res, err := sim.RunCollective(ctx, scfg, coll, run, int(size))
			var wrong int64
			if b.check && errors.Is(err, sim.ErrWrong) {
				wrong, err = res.Wrong, nil
			}
			if err != nil {
				return nil, err
			}
			if cfg.verbose {
				fmt.Fprintf(out, "# %s %s, %d ranks on %s, %d bytes: %.3f us\n", name, b.op, n, plural(cfg.topo.Hosts, "host"), size, res.Time*1e6)
				if err := sim.Transcript(out, res.Events, true); err != nil {
					return nil, err
				}
			}
			runs = append(runs, simRun{row: simRow(cfg, name, size, res, wrong), model: algo.CostTopo(coll, run, int(size), n, modelTopology(cfg)), events: res.Events})
		}
	}
	return runs, nil
}

// simRow is a simulated run as a row of the bench table.
func simRow(cfg *simConfig, name string, size int64, res *sim.Result, wrong int64) result {
	b := &cfg.bench
	n := b.ranks
	algbw := 0.0
	if res.Time > 0 {
		algbw = float64(size) / res.Time / 1e9
	}
	redop := "none"
	if needsOp(b.op) {
		redop = b.redop.String()
	}
	root := -1
	switch b.op {
	case "broadcast", "reduce", "gather", "scatter":
		root = 0
	}
	r := result{
		Bytes: size, Count: size / int64(cfg.elemSize), Type: b.dtype.String(), Redop: redop, Root: root, Algo: name,
		TimeUS: res.Time * 1e6, AlgBW: algbw, BusBW: algbw * commslog.BusFactor(benchOps[b.op].log, n),
		Ranks: n, Op: b.op, Transport: "sim", SentPerRank: res.Bytes / int64(n),
	}
	if b.check {
		r.Wrong = &wrong
	}
	return r
}

// simReport writes the rows as goccl bench does, under a header that
// describes the simulated machine.
func simReport(w io.Writer, cfg *simConfig, rows []result) error {
	if cfg.bench.format != "table" {
		return report(w, &cfg.bench, rows)
	}
	var buf bytes.Buffer
	if err := report(&buf, &cfg.bench, rows); err != nil {
		return err
	}
	t := cfg.topo
	fmt.Fprintf(w, "# goccl sim: %s, %d ranks on %s; between hosts %s + %s/B over %d NIC(s) per host",
		cfg.bench.op, cfg.bench.ranks, plural(t.Hosts, "host"), fmtTime(t.Inter.Alpha), fmtTime(t.Inter.Beta), max(1, t.NICs))
	if t.HostsPerLeaf > 0 {
		fmt.Fprintf(w, ", %d hosts per leaf, uplinks oversubscribed %gx", t.HostsPerLeaf, t.Oversubscription)
	}
	fmt.Fprintf(w, "; within a host %s + %s/B; reduce %s/B; virtual time\n", fmtTime(t.Intra.Alpha), fmtTime(t.Intra.Beta), fmtTime(cfg.gamma))
	// report's first line describes a measured run; the rest is the table.
	out := buf.Bytes()
	if i := bytes.IndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	_, err := w.Write(out)
	return err
}

// fmtTime shows seconds in the largest unit that keeps them above 1.
func fmtTime(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s >= 1:
		return strconv.FormatFloat(s, 'g', 4, 64) + "s"
	case s >= 1e-3:
		return strconv.FormatFloat(s*1e3, 'g', 4, 64) + "ms"
	case s >= 1e-6:
		return strconv.FormatFloat(s*1e6, 'g', 4, 64) + "us"
	case s >= 1e-9:
		return strconv.FormatFloat(s*1e9, 'g', 4, 64) + "ns"
	}
	return strconv.FormatFloat(s*1e12, 'g', 4, 64) + "ps"
}

func writeSimTrace(cfg *simConfig, runs []simRun) error {
	f, err := os.Create(cfg.trace)
	if err != nil {
		return err
	}
	trs := make([]sim.TraceRun, len(runs))
	for i, r := range runs {
		trs[i] = sim.TraceRun{Name: fmt.Sprintf("%s %s %d B", r.row.Algo, r.row.Op, r.row.Bytes), Ranks: r.row.Ranks, Events: r.events}
	}
	if err := sim.WriteTrace(f, trs...); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotSim draws busbw against size, a solid line per algorithm and, dashed
// in the same colour, what algo.CostTopo predicts for it (modelTopology).
func plotSim(path string, cfg *simConfig, runs []simRun) error {
	b := &cfg.bench
	p := plot.New()
	p.Title.Text = fmt.Sprintf("goccl sim %s, %d ranks on %s (dashed: cost formula)", b.op, b.ranks, plural(cfg.topo.Hosts, "host"))
	p.X.Label.Text = "message size (bytes)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Label.Text = "busbw (" + b.units.String() + ")"
	p.Legend.Top = true
	p.Legend.Left = true
	simL, modelL := map[string]plotter.XYs{}, map[string]plotter.XYs{}
	factor := commslog.BusFactor(benchOps[b.op].log, b.ranks)
	for _, r := range runs {
		if r.row.Bytes <= 0 {
			continue // a log axis has no zero
		}
		x := float64(r.row.Bytes)
		simL[r.row.Algo] = append(simL[r.row.Algo], plotter.XY{X: x, Y: b.units.Convert(r.row.BusBW * 1e9)})
		if r.model > 0 && !math.IsInf(r.model, 0) {
			modelL[r.row.Algo] = append(modelL[r.row.Algo], plotter.XY{X: x, Y: b.units.Convert(x / r.model * factor)})
		}
	}
	if len(simL) == 0 {
		return errors.New("no sizes above zero to plot")
	}
	names := make([]string, 0, len(simL))
	for name := range simL {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		l, pts, err := plotter.NewLinePoints(simL[name])
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
		if m := modelL[name]; len(m) > 0 {
			ml, err := plotter.NewLine(m)
			if err != nil {
				return err
			}
			ml.Color = plotutil.Color(i)
			ml.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			p.Add(ml)
			p.Legend.Add(name+" (formula)", ml)
		}
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
