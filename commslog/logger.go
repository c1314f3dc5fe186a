package commslog

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Record is one timed op on one rank.
type Record struct {
	Op        string        `json:"op"`        // DeepSpeed log name, e.g. "all_reduce"
	Bytes     int64         `json:"bytes"`     // message size as nccl-tests counts it
	DType     string        `json:"dtype"`     // "float32", ...; "" for object and barrier ops
	Algo      string        `json:"algo"`      // algorithm that ran ("ring", "tree", ...)
	Rank      int           `json:"rank"`      // rank in the communicator the op ran on
	WorldSize int           `json:"worldSize"` // size of that communicator
	Start     time.Time     `json:"start"`
	Latency   time.Duration `json:"latency"`
	Caller    string        `json:"caller,omitempty"` // calling function, with Config.Debug
	AlgBW     float64       `json:"algbw"`            // bytes/s: Bytes / Latency
	BusBW     float64       `json:"busbw"`            // bytes/s: AlgBW * BusFactor(Op, WorldSize)
}

// Name is the op name as the summary shows it: Op, followed by the caller
// when there is one (as DeepSpeed does in debug mode).
func (r Record) Name() string {
	if r.Caller == "" {
		return r.Op
	}
	return r.Op + " | [Caller Func: " + r.Caller + "]"
}

// Logger collects Records. Its methods are safe for concurrent use and safe
// on a nil *Logger, which, like a Logger whose Config is not Enabled, does
// nothing. The Config is fixed when the Logger is made; which ops are timed
// can change at run time (StartProfiling, StopProfiling).
type Logger struct {
	cfg  Config
	on   bool
	rank int
	size int

	prof atomic.Pointer[profSet] // read on every op; replaced, never changed
	pmu  sync.Mutex              // serialises the writers of prof

	mu     sync.Mutex
	blocks [][]Record // full blocks of blockLen records, then a partial one
	n      int        // records kept
}

// blockLen is the number of records per block. Records are kept in blocks
// so that a long run appends without copying what it kept before.
const blockLen = 512

// New returns a Logger for this rank of a communicator of worldSize ranks.
// Records appended without a WorldSize get rank and worldSize.
func New(cfg Config, rank, worldSize int) *Logger {
	cfg.ProfOps = append([]string(nil), cfg.ProfOps...)
	l := &Logger{cfg: cfg, on: cfg.Enabled, rank: rank, size: worldSize}
	l.prof.Store(&profSet{
		all: cfg.ProfAll || (len(cfg.ProfOps) == 0 && !cfg.ProfOpsOnly),
		ops: slices.Clone(cfg.ProfOps),
	})
	return l
}

// profSet is which ops are timed: every op when all (DeepSpeed's
// prof_all), else those in ops (its prof_ops). A scan beats a map for a
// few names.
type profSet struct {
	all bool
	ops []string
}

// Config returns the logger's configuration as given to New (the zero
// Config for nil). StartProfiling and StopProfiling do not change it; see
// Profiled.
func (l *Logger) Config() Config {
	if l == nil {
		return Config{}
	}
	c := l.cfg
	c.ProfOps = append([]string(nil), c.ProfOps...)
	return c
}

// Enabled reports whether the logger records anything at all.
func (l *Logger) Enabled() bool { return l != nil && l.on }

// Debug reports whether records should carry their caller's name.
func (l *Logger) Debug() bool { return l != nil && l.on && l.cfg.Debug }

// Profiling reports whether op is timed. It is the check a communicator
// makes before reading the clock; it costs about a nanosecond when the
// logger is nil or disabled.
func (l *Logger) Profiling(op string) bool {
	if l == nil || !l.on {
		return false
	}
	p := l.prof.Load()
	if p.all {
		return true
	}
	for _, o := range p.ops {
		if o == op {
			return true
		}
	}
	return false
}

// StartProfiling starts timing ops at run time. With no names it times
// every op (DeepSpeed's start_profiling_comms, prof_all = True); with names
// it adds them to the ops timed (start_profiling_op). It does not turn on a
// logger whose Config is not Enabled. Ops already running when it is
// called are recorded if they are being profiled when they finish.
func (l *Logger) StartProfiling(ops ...string) {
	l.setProf(func(p *profSet) {
		if len(ops) == 0 {
			p.all = true
			return
		}
		for _, op := range ops {
			if !slices.Contains(p.ops, op) {
				p.ops = append(p.ops, op)
			}
		}
	})
}

// StopProfiling stops timing ops at run time. With no names it ends
// "every op" (DeepSpeed's stop_profiling_comms, prof_all = False), leaving
// only the named ops timed (none if there are none); with names it removes
// them from the ops timed (stop_profiling_op), which does not stop them
// while every op is timed. Records kept so far stay.
func (l *Logger) StopProfiling(ops ...string) {
	l.setProf(func(p *profSet) {
		if len(ops) == 0 {
			p.all = false
			return
		}
		p.ops = slices.DeleteFunc(p.ops, func(o string) bool { return slices.Contains(ops, o) })
	})
}

// Profiled returns which ops are timed now: all reports every op (prof_all);
// otherwise ops lists them (prof_ops). It is (false, nil) for a nil or
// disabled logger.
func (l *Logger) Profiled() (all bool, ops []string) {
	if l == nil || !l.on {
		return false, nil
	}
	p := l.prof.Load()
	return p.all, slices.Clone(p.ops)
}

func (l *Logger) setProf(change func(*profSet)) {
	if l == nil {
		return
	}
	l.pmu.Lock()
	defer l.pmu.Unlock()
	old := l.prof.Load()
	p := &profSet{all: old.all, ops: slices.Clone(old.ops)}
	change(p)
	l.prof.Store(p)
}

// Append keeps r if r.Op is being profiled. It fills in AlgBW and BusBW
// from Bytes, Latency and WorldSize (a zero WorldSize takes the logger's
// rank and size), and with Config.Debug an empty Caller with the first
// function on the stack outside goccl's root package and this one. With
// Config.Verbose it writes one log line in the Config's Style.
func (l *Logger) Append(r Record) {
	if !l.Profiling(r.Op) {
		return
	}
	if r.WorldSize == 0 {
		r.Rank, r.WorldSize = l.rank, l.size
	}
	r.AlgBW = AlgBW(r.Bytes, r.Latency)
	r.BusBW = r.AlgBW * BusFactor(r.Op, r.WorldSize)
	if l.cfg.Debug && r.Caller == "" {
		r.Caller = outsideCaller()
	}
	l.mu.Lock()
	if l.n%blockLen == 0 {
		l.blocks = append(l.blocks, make([]Record, 0, blockLen))
	}
	b := &l.blocks[len(l.blocks)-1]
	*b = append(*b, r)
	l.n++
	l.mu.Unlock()
	if l.cfg.Verbose {
		l.verbose(r)
	}
}

func (l *Logger) verbose(r Record) {
	lg := l.cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	if l.cfg.Style == StyleDeepSpeed {
		// DeepSpeed logs with log_dist(..., ranks=[0]): rank 0 only, its
		// rank in front.
		if l.rank == 0 {
			lg.LogAttrs(context.Background(), slog.LevelInfo, "[Rank 0] "+DeepSpeedVerboseLine(r))
		}
		return
	}
	u := l.cfg.Units
	attrs := []slog.Attr{
		slog.String("op", r.Op),
		slog.Int("rank", r.Rank),
		slog.Float64("latency_ms", float64(r.Latency)/float64(time.Millisecond)),
		slog.String("msg_size", ConvertSize(r.Bytes)),
		slog.Int64("bytes", r.Bytes),
		slog.String("dtype", r.DType),
		slog.String("algo", r.Algo),
		slog.Float64("algbw", round2(u.Convert(r.AlgBW))),
		slog.Float64("busbw", round2(u.Convert(r.BusBW))),
		slog.String("units", u.String()),
	}
	if r.Caller != "" {
		attrs = append(attrs, slog.String("caller", r.Caller))
	}
	lg.LogAttrs(context.Background(), slog.LevelInfo, "comm op", attrs...)
}

// Len returns the number of records kept.
func (l *Logger) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Records returns a copy of the records kept so far, in the order they
// were appended.
func (l *Logger) Records() []Record {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return nil
	}
	out := make([]Record, 0, l.n)
	for _, b := range l.blocks {
		out = append(out, b...)
	}
	return out
}

// Reset drops every record kept so far.
func (l *Logger) Reset() {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.blocks, l.n = nil, 0
	l.mu.Unlock()
}

// Caller returns the name of a function on the calling goroutine's stack,
// in the short form "pkg.Func" or "pkg.(*T).Method": skip 0 is the function
// that calls Caller, 1 its caller, and so on. It returns "" when the stack
// is not that deep. The root package uses it to name the user's function
// before a collective moves to another goroutine.
func Caller(skip int) string {
	var pc [1]uintptr
	if runtime.Callers(skip+2, pc[:]) == 0 {
		return ""
	}
	f, _ := runtime.CallersFrames(pc[:]).Next()
	return shortName(f.Function)
}

// internal are the function-name prefixes outsideCaller skips: goccl's
// root package, this package, and the runtime.
var internal = []string{"github.com/goccl/goccl.", "github.com/goccl/goccl/commslog.", "runtime."}

// outsideCaller returns the first function on the stack that is not in
// goccl's root package or this one (test files count as outside), or
// "unknown" when there is none, as when the op ran on its own goroutine.
func outsideCaller() string {
	var pcs [32]uintptr
	n := runtime.Callers(2, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function != "" && !isInternal(f) {
			return shortName(f.Function)
		}
		if !more {
			return "unknown"
		}
	}
}

func isInternal(f runtime.Frame) bool {
	if strings.HasSuffix(f.File, "_test.go") {
		return false
	}
	for _, p := range internal {
		if strings.HasPrefix(f.Function, p) {
			return true
		}
	}
	return false
}

// shortName strips the import path: "github.com/a/b.(*T).M" -> "b.(*T).M".
func shortName(fn string) string {
	if i := strings.LastIndexByte(fn, '/'); i >= 0 {
		return fn[i+1:]
	}
	return fn
}
