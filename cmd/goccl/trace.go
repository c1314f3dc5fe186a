package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goccl/goccl/internal/flight"
)

const traceUsage = `usage: goccl trace analyze DIR

Reads the flight recorder dumps that the ranks of a job wrote to DIR (one
file per rank, rank-R.jsonl) and says where the ranks part ways: the first
call, in the world or in a group, at which they diverge; the ranks that
never entered it and those still in it; calls whose arguments differ, side
by side; and the rank everyone waits on, found by following whom each rank
in a call was waiting on. The verdict comes first, the details after it.

Exit status: 0 when every rank completed the same calls, 1 when a problem
is found, 2 when DIR or a dump in it cannot be read.
`

// traceMain runs `goccl trace`.
func traceMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, traceUsage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprint(stderr, traceUsage)
		return 0
	case "analyze":
	default:
		fmt.Fprintf(stderr, "goccl trace: unknown subcommand %q\n\n%s", args[0], traceUsage)
		return 2
	}
	fs := flag.NewFlagSet("trace analyze", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, traceUsage) }
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "goccl trace analyze: want one directory, got %q\n\n%s", fs.Args(), traceUsage)
		return 2
	}
	job, err := loadTrace(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "goccl trace analyze:", err)
		return 2
	}
	if job.analyze().write(stdout) {
		return 1
	}
	return 0
}

// traceDump is one rank's dump.
type traceDump struct {
	file    string
	h       flight.Header
	entries []flight.Entry
	warn    string // a line that could not be read: the entries before it are kept
}

// full reports whether the ring was full: it has forgotten older calls.
func (d *traceDump) full() bool { return d.h.Capacity > 0 && len(d.entries) >= d.h.Capacity }

// traceJob is every dump of a job.
type traceJob struct {
	size  int
	dumps map[int]*traceDump // by world rank
}

// loadTrace reads DIR/rank-R.jsonl for every R there is. A file that is not
// a dump, or whose header disagrees with its name or with the other
// headers, is an error naming the file; an entry that cannot be read (a
// dump cut short) keeps the entries before it with a warning.
func loadTrace(dir string) (*traceJob, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	job := &traceJob{dumps: map[int]*traceDump{}}
	sizeFrom := ""
	for _, de := range des {
		name := de.Name()
		rs, ok := strings.CutPrefix(name, "rank-")
		if !ok || de.IsDir() {
			continue
		}
		if rs, ok = strings.CutSuffix(rs, ".jsonl"); !ok {
			continue
		}
		r, err := strconv.Atoi(rs)
		if err != nil || r < 0 {
			return nil, fmt.Errorf("%s: not a rank-R.jsonl name", filepath.Join(dir, name))
		}
		path := filepath.Join(dir, name)
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		h, es, err := flight.Read(f)
		f.Close()
		d := &traceDump{file: name, h: h, entries: es}
		if err != nil {
			if h.Trace != "goccl" {
				return nil, fmt.Errorf("%s: %v", path, err)
			}
			d.warn = fmt.Sprintf("%s: %v (the %s before it are used)", name, err, plural(len(es), "call"))
		}
		switch {
		case h.Rank != r:
			return nil, fmt.Errorf("%s: its header says rank %d", path, h.Rank)
		case h.Size <= 0 || r >= h.Size:
			return nil, fmt.Errorf("%s: rank %d in a world of size %d", path, r, h.Size)
		case job.size == 0:
			job.size, sizeFrom = h.Size, name
		case h.Size != job.size:
			return nil, fmt.Errorf("%s: world size %d, but %s says %d", path, h.Size, sizeFrom, job.size)
		}
		job.dumps[r] = d
	}
	if len(job.dumps) == 0 {
		return nil, fmt.Errorf("%s: no dumps (rank-R.jsonl files) in it", dir)
	}
	return job, nil
}

// traceGroup is what the dumps show of one group's calls.
type traceGroup struct {
	id      uint64
	members []int                            // world ranks, by group rank
	calls   map[int]map[uint64]*flight.Entry // world rank -> seq -> its call
	last    map[int]*flight.Entry            // world rank -> its highest seq
	floor   map[int]uint64                   // full rings: the lowest seq they still hold
	unknown map[int]bool                     // no dump, or a full ring with no call of the group
	nodump  map[int]bool                     // no dump at all
}

func (g *traceGroup) name() string {
	if g.id == 0 {
		return "world"
	}
	return fmt.Sprintf("group %d", g.id)
}

// the is "the world" or "group 5".
func (g *traceGroup) the() string {
	if g.id == 0 {
		return "the world"
	}
	return g.name()
}

// title names the group with its members.
func (g *traceGroup) title() string {
	return fmt.Sprintf("%s (ranks %s)", g.name(), rankList(g.members))
}

// worldRank maps a group rank of e's group to a world rank; -1 if it is
// out of range.
func (g *traceGroup) worldRank(e *flight.Entry, gr int) int {
	members := e.Ranks
	if len(members) == 0 {
		members = g.members
	}
	if gr < 0 || gr >= len(members) {
		return -1
	}
	return members[gr]
}

// What a rank's dump says of a call.
type callState int

const (
	csAbsent  callState = iota // the rank never entered it
	csCall                     // the dump holds the rank's call
	csPassed                   // the rank's ring had passed it and forgotten it
	csUnknown                  // no dump, or a full ring that holds no call of the group
)

func (g *traceGroup) at(r int, s uint64) (callState, *flight.Entry) {
	if g.unknown[r] {
		return csUnknown, nil
	}
	if e := g.calls[r][s]; e != nil {
		return csCall, e
	}
	if f, ok := g.floor[r]; ok && s < f {
		return csPassed, nil
	}
	return csAbsent, nil
}

// groups sorts the dumps' calls into groups, the world first.
func (j *traceJob) groups() []*traceGroup {
	byID := map[uint64]*traceGroup{}
	get := func(id uint64) *traceGroup {
		g := byID[id]
		if g == nil {
			g = &traceGroup{id: id, calls: map[int]map[uint64]*flight.Entry{}, last: map[int]*flight.Entry{},
				floor: map[int]uint64{}, unknown: map[int]bool{}, nodump: map[int]bool{}}
			byID[id] = g
		}
		return g
	}
	world := get(0)
	for r := range j.size {
		world.members = append(world.members, r)
	}
	for _, r := range sortedKeys(j.dumps) {
		d := j.dumps[r]
		for i := range d.entries {
			e := &d.entries[i]
			g := get(e.Group)
			if g.members == nil && len(e.Ranks) > 0 {
				g.members = slices.Clone(e.Ranks)
			}
			if g.calls[r] == nil {
				g.calls[r] = map[uint64]*flight.Entry{}
			}
			g.calls[r][e.Seq] = e
			if l := g.last[r]; l == nil || e.Seq > l.Seq {
				g.last[r] = e
			}
		}
	}
	var gs []*traceGroup
	for _, id := range sortedKeys(byID) {
		g := byID[id]
		if g.members == nil { // a group whose entries do not say its ranks
			g.members = sortedKeys(g.calls)
		}
		for _, r := range g.members {
			d := j.dumps[r]
			switch {
			case d == nil:
				g.unknown[r], g.nodump[r] = true, true
			case d.full() && len(g.calls[r]) == 0:
				g.unknown[r] = true
			case d.full():
				g.floor[r] = slices.Min(sortedKeys(g.calls[r]))
			}
		}
		gs = append(gs, g)
	}
	return gs
}

// traceFinding is the first call of a group at which the ranks part ways.
type traceFinding struct {
	g       *traceGroup
	seq     uint64
	calls   map[int]*flight.Entry // members whose dumps hold the call
	absent  []int                 // members that never entered it
	passed  []int                 // members whose rings have forgotten it
	unknown []int                 // members whose dumps cannot tell
	differ  bool                  // the calls' arguments differ
	open    bool                  // some member has not finished it
}

// firstDivergence scans g's calls in order for the first at which a member
// never entered a call others entered, the members' calls differ, or a
// member has not finished it. Only the sequence numbers the dumps hold, and
// the ones right after them, can be such a call.
func (g *traceGroup) firstDivergence() *traceFinding {
	cand := map[uint64]bool{1: true}
	for _, r := range g.members {
		for s := range g.calls[r] {
			cand[s], cand[s+1] = true, true
		}
	}
	for _, s := range sortedKeys(cand) {
		f := &traceFinding{g: g, seq: s, calls: map[int]*flight.Entry{}}
		for _, r := range g.members {
			switch st, e := g.at(r, s); st {
			case csCall:
				f.calls[r] = e
				if e.State != flight.Done {
					f.open = true
				}
			case csPassed:
				f.passed = append(f.passed, r)
			case csAbsent:
				f.absent = append(f.absent, r)
			case csUnknown:
				f.unknown = append(f.unknown, r)
			}
		}
		if len(f.calls)+len(f.passed) == 0 {
			continue
		}
		f.differ = callsDiffer(f.calls)
		if len(f.absent) > 0 || f.differ || f.open {
			return f
		}
	}
	return nil
}

// callsDiffer reports whether calls differ in collective, count, dtype,
// reduction or root; a count of -1 (ranks may differ) matches any.
func callsDiffer(calls map[int]*flight.Entry) bool {
	key, count, first := "", int64(-1), true
	for _, e := range calls {
		k := e.Op + "\x00" + e.DType + "\x00" + e.RedOp + "\x00" + strconv.Itoa(e.Root)
		if first {
			key, first = k, false
		} else if k != key {
			return true
		}
		if e.Count >= 0 {
			if count >= 0 && e.Count != count {
				return true
			}
			count = e.Count
		}
	}
	return false
}

// callString writes a call the way goccl's mismatch errors do.
func callString(e *flight.Entry) string {
	var args []string
	if e.DType != "" {
		args = append(args, "dtype="+e.DType)
	}
	if e.Count >= 0 {
		args = append(args, fmt.Sprintf("count=%d", e.Count))
	} else {
		args = append(args, "count=any")
	}
	if e.RedOp != "" {
		args = append(args, "op="+e.RedOp)
	}
	if e.Root >= 0 {
		args = append(args, fmt.Sprintf("root=%d", e.Root))
	}
	return e.Op + "(" + strings.Join(args, ", ") + ")"
}

// traceCall is one distinct call at a finding and the ranks that made it.
type traceCall struct {
	call  string
	ranks []int
}

// distinct is f's calls, the one most ranks made first.
func (f *traceFinding) distinct() []traceCall {
	idx := map[string]int{}
	var cs []traceCall
	for _, r := range sortedKeys(f.calls) {
		c := callString(f.calls[r])
		if i, ok := idx[c]; ok {
			cs[i].ranks = append(cs[i].ranks, r)
			continue
		}
		idx[c] = len(cs)
		cs = append(cs, traceCall{c, []int{r}})
	}
	slices.SortStableFunc(cs, func(a, b traceCall) int { return len(b.ranks) - len(a.ranks) })
	return cs
}

// skipHints says, for the ranks whose call differs from the one most ranks
// made, whether their call is the others' next one (they skipped this one)
// or their next call is the others' this one (they made an extra call).
func (f *traceFinding) skipHints() []string {
	cs := f.distinct()
	if !f.differ || len(cs) < 2 || len(cs[0].ranks) == len(cs[1].ranks) {
		return nil
	}
	major := cs[0]
	next := "" // the call the majority made after this one, if they agree
	for i, r := range major.ranks {
		e := f.g.calls[r][f.seq+1]
		if e == nil || (i > 0 && callString(e) != next) {
			next = ""
			break
		}
		next = callString(e)
	}
	var hints []string
	for _, c := range cs[1:] {
		for _, r := range c.ranks {
			if next != "" && c.call == next {
				hints = append(hints, fmt.Sprintf("rank %d may have skipped #%d %s: its #%d is the others' #%d",
					r, f.seq, f.calls[major.ranks[0]].Op, f.seq, f.seq+1))
			} else if e := f.g.calls[r][f.seq+1]; e != nil && callString(e) == major.call {
				hints = append(hints, fmt.Sprintf("rank %d may have made an extra call at #%d: its #%d is the others' #%d",
					r, f.seq, f.seq+1, f.seq))
			}
		}
	}
	return hints
}

// lastCall describes r's last call of g, for a rank that never entered a
// later one.
func (g *traceGroup) lastCall(r int) string {
	l := g.last[r]
	if l == nil {
		return "it made no call of " + g.the()
	}
	s := fmt.Sprintf("its last call was #%d %s", l.Seq, l.Op)
	if l.State != flight.Done {
		s += ", " + l.State
	}
	return s
}

// ranksWord is "rank 2" or "ranks 0, 1, 3".
func ranksWord(rs []int) string {
	if len(rs) == 1 {
		return fmt.Sprintf("rank %d", rs[0])
	}
	return "ranks " + rankList(rs)
}

// verdict is f in one line.
func (f *traceFinding) verdict() string {
	where := fmt.Sprintf("%s #%d", f.g.name(), f.seq)
	cs := f.distinct()
	var parts []string
	switch {
	case f.differ:
		var side []string
		for _, c := range cs {
			side = append(side, fmt.Sprintf("%s called %s", ranksWord(c.ranks), c.call))
		}
		parts = append(parts, "calls differ: "+strings.Join(side, ", "))
		parts = append(parts, f.skipHints()...)
	case len(cs) > 0:
		where += " " + cs[0].call
	}
	if len(f.absent) == 1 {
		parts = append(parts, fmt.Sprintf("rank %d never entered it (%s)", f.absent[0], f.g.lastCall(f.absent[0])))
	} else if len(f.absent) > 1 {
		parts = append(parts, fmt.Sprintf("ranks %s never entered it", rankList(f.absent)))
	}
	var in, failed, done []int
	for _, r := range sortedKeys(f.calls) {
		switch f.calls[r].State {
		case flight.Done:
			done = append(done, r)
		case flight.Failed:
			failed = append(failed, r)
		default:
			in = append(in, r)
		}
	}
	if len(in) > 0 {
		parts = append(parts, ranksWord(in)+" still in it")
	}
	if len(failed) == 1 && f.calls[failed[0]].Error != "" {
		parts = append(parts, fmt.Sprintf("rank %d failed it: %s", failed[0], f.calls[failed[0]].Error))
	} else if len(failed) > 0 {
		parts = append(parts, ranksWord(failed)+" failed it")
	}
	if len(done) > 0 && (len(f.absent) > 0 || len(in)+len(failed) > 0) {
		parts = append(parts, ranksWord(done)+" finished it")
	}
	if len(f.passed) > 0 {
		parts = append(parts, ranksWord(f.passed)+" passed it")
	}
	var dumpless []int
	for _, r := range f.unknown {
		if f.g.nodump[r] {
			dumpless = append(dumpless, r)
		}
	}
	if len(dumpless) == 1 {
		parts = append(parts, fmt.Sprintf("rank %d left no dump (dead?)", dumpless[0]))
	} else if len(dumpless) > 1 {
		parts = append(parts, fmt.Sprintf("ranks %s left no dump (dead?)", rankList(dumpless)))
	}
	return where + ": " + strings.Join(parts, "; ")
}

// traceWait is one edge of the wait-for graph: a rank in a call waits on
// another, both world ranks.
type traceWait struct {
	from, to int
	g        *traceGroup
	seq      uint64
}

// waits is the wait-for graph from the calls in flight (or failed while
// waiting) that say whom they wait on. The calls of a divergence whose
// arguments differ are left out: their ranks wait on each other because
// they made different calls, which the divergence says, not because one
// of them hangs.
func (j *traceJob) waits(gs []*traceGroup, fs []*traceFinding) []traceWait {
	byID := map[uint64]*traceGroup{}
	for _, g := range gs {
		byID[g.id] = g
	}
	type call struct{ group, seq uint64 }
	differ := map[call]bool{}
	for _, f := range fs {
		if f.differ {
			differ[call{f.g.id, f.seq}] = true
		}
	}
	var ws []traceWait
	seen := map[[2]int]bool{}
	for _, r := range sortedKeys(j.dumps) {
		for i := range j.dumps[r].entries {
			e := &j.dumps[r].entries[i]
			if e.State == flight.Done || differ[call{e.Group, e.Seq}] {
				continue
			}
			g := byID[e.Group]
			for _, gr := range e.WaitingOn {
				to := g.worldRank(e, gr)
				if to < 0 || to == r || seen[[2]int{r, to}] {
					continue
				}
				seen[[2]int{r, to}] = true
				ws = append(ws, traceWait{r, to, g, e.Seq})
			}
		}
	}
	return ws
}

// traceBlame is the rank at the end of the wait chains.
type traceBlame struct {
	target  int
	waiters []int         // the ranks whose chains end at target
	paths   map[int][]int // waiter -> its chain to target
	via     traceWait     // a wait on target, for what target was in
	cycle   []int         // when the waits only go round
}

// blame follows the waits: the chains' ends are ranks that wait on no one
// (a rank that never entered the call, one stuck in it, a dead one), and
// the end that most ranks lead to is the rank everyone waits on.
func blame(ws []traceWait) *traceBlame {
	if len(ws) == 0 {
		return nil
	}
	out := map[int][]int{}
	for _, w := range ws {
		out[w.from] = append(out[w.from], w.to)
	}
	count := map[int][]int{}
	for _, a := range sortedKeys(out) {
		seen := map[int]bool{a: true}
		stack := []int{a}
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if len(out[n]) == 0 {
				count[n] = append(count[n], a)
			}
			for _, m := range out[n] {
				if !seen[m] {
					seen[m] = true
					stack = append(stack, m)
				}
			}
		}
	}
	if len(count) == 0 { // every chain goes round: name one cycle
		a := sortedKeys(out)[0]
		pos := map[int]int{}
		var path []int
		for n := a; ; n = out[n][0] {
			if i, ok := pos[n]; ok {
				return &traceBlame{target: -1, cycle: append(path[i:], n)}
			}
			pos[n] = len(path)
			path = append(path, n)
		}
	}
	t := -1
	for _, n := range sortedKeys(count) {
		if t < 0 || len(count[n]) > len(count[t]) {
			t = n
		}
	}
	b := &traceBlame{target: t, waiters: count[t], paths: map[int][]int{}}
	for _, w := range ws {
		if w.to == t {
			b.via = w
			break
		}
	}
	for _, a := range b.waiters { // shortest chain from a to t
		prev := map[int]int{a: a}
		queue := []int{a}
		for len(queue) > 0 && !hasKey(prev, t) {
			n := queue[0]
			queue = queue[1:]
			for _, m := range out[n] {
				if !hasKey(prev, m) {
					prev[m] = n
					queue = append(queue, m)
				}
			}
		}
		path := []int{t}
		for n := t; n != a; n = prev[n] {
			path = append(path, prev[n])
		}
		slices.Reverse(path)
		b.paths[a] = path
	}
	return b
}

// whyWaited says what the rank at the end of the chains was doing in the
// call that the others wait on it in.
func (j *traceJob) whyWaited(t int, w traceWait) string {
	d := j.dumps[t]
	if d == nil {
		return fmt.Sprintf("no dump from rank %d (dead, or it could not write)", t)
	}
	g := w.g
	where := fmt.Sprintf("%s #%d", g.name(), w.seq)
	switch st, e := g.at(t, w.seq); st {
	case csCall:
		call := where + " " + e.Op
		switch e.State {
		case flight.Done:
			return "it finished " + call + " (lost messages?)"
		case flight.Failed:
			if e.Error != "" {
				return "it failed " + call + ": " + e.Error
			}
			return "it failed " + call
		}
		msg := "it is in " + call + " and waits on no one"
		if since := sinceStart(d.h, e); since != "" {
			msg += " (" + e.State + " " + since + " before its dump)"
		}
		return msg
	case csPassed:
		return "its ring has forgotten " + where + ", which it had passed"
	case csUnknown:
		return "its ring holds no call of " + g.the()
	}
	s := fmt.Sprintf("it never entered %s (%s)", where, g.lastCall(t))
	for i := range d.entries { // where it is instead
		e := &d.entries[i]
		if e.State == flight.Issued || e.State == flight.Started {
			if e.Group != g.id {
				s += fmt.Sprintf("; it is in group %d #%d %s", e.Group, e.Seq, e.Op)
				if e.Group == 0 {
					s = strings.Replace(s, "group 0", "world", 1)
				}
			}
		}
	}
	return s
}

// sinceStart is how long e had run (or waited to start) when its rank
// dumped, or "" when the times do not say.
func sinceStart(h flight.Header, e *flight.Entry) string {
	t := e.Started
	if t.IsZero() {
		t = e.Issued
	}
	if t.IsZero() || h.Dumped.IsZero() || !h.Dumped.After(t) {
		return ""
	}
	return h.Dumped.Sub(t).Round(time.Millisecond).String()
}

// traceReport is the analysis of a job's dumps.
type traceReport struct {
	job      *traceJob
	groups   []*traceGroup
	findings []*traceFinding
	waits    []traceWait
	blame    *traceBlame
	missing  []int // world ranks with no dump
}

func (j *traceJob) analyze() *traceReport {
	rep := &traceReport{job: j, groups: j.groups()}
	for _, g := range rep.groups {
		if f := g.firstDivergence(); f != nil {
			rep.findings = append(rep.findings, f)
		}
	}
	rep.waits = j.waits(rep.groups, rep.findings)
	rep.blame = blame(rep.waits)
	for r := range j.size {
		if j.dumps[r] == nil {
			rep.missing = append(rep.missing, r)
		}
	}
	return rep
}

// write prints the verdict, then the details; it reports whether it found
// a problem.
func (rep *traceReport) write(w io.Writer) bool {
	j := rep.job
	var verdict []string
	for _, f := range rep.findings {
		verdict = append(verdict, f.verdict())
	}
	blamed := -1
	if b := rep.blame; b != nil {
		if b.target < 0 {
			verdict = append(verdict, "the waits go round: "+chain(b.cycle)+" (calls made in different orders?)")
		} else {
			blamed = b.target
			who := ranksWord(b.waiters) + " wait on rank " + strconv.Itoa(b.target)
			if len(b.waiters) == 1 {
				who = ranksWord(b.waiters) + " waits on rank " + strconv.Itoa(b.target)
			}
			if len(b.waiters) == len(j.dumps)-boolInt(j.dumps[b.target] != nil) {
				who = "everyone waits on rank " + strconv.Itoa(b.target)
			}
			verdict = append(verdict, who+": "+j.whyWaited(b.target, b.via))
		}
	}
	for _, r := range rep.missing {
		if r != blamed {
			verdict = append(verdict, fmt.Sprintf("no dump from rank %d (dead, or it could not write)", r))
		}
	}
	problem := len(verdict) > 0
	if !problem {
		fmt.Fprintln(w, "no problem found: all ranks completed the same calls")
	}
	for _, v := range verdict {
		fmt.Fprintln(w, "problem: "+v)
	}

	for _, f := range rep.findings {
		fmt.Fprintf(w, "\n%s, first divergence at #%d:\n", f.g.title(), f.seq)
		if f.differ {
			fmt.Fprintln(w, "  calls differ:")
			var rows [][]string
			for _, c := range f.distinct() {
				rows = append(rows, []string{"  " + ranksWord(c.ranks), c.call})
			}
			writeTable(w, rows)
			for _, h := range f.skipHints() {
				fmt.Fprintln(w, "  "+h)
			}
		}
		var rows [][]string
		for _, r := range f.g.members {
			row := []string{fmt.Sprintf("rank %d", r)}
			switch st, e := f.g.at(r, f.seq); st {
			case csCall:
				var extra []string
				if e.State == flight.Issued || e.State == flight.Started {
					if since := sinceStart(j.dumps[r].h, e); since != "" {
						extra = append(extra, "for "+since)
					}
				}
				if len(e.WaitingOn) > 0 && e.State != flight.Done {
					var on []int
					for _, gr := range e.WaitingOn {
						if wr := f.g.worldRank(e, gr); wr >= 0 {
							on = append(on, wr)
						}
					}
					extra = append(extra, "waiting on "+rankList(on))
				}
				if e.Algo != "" {
					extra = append(extra, "algo "+e.Algo)
				}
				if e.Caller != "" {
					extra = append(extra, "called from "+e.Caller)
				}
				if e.Error != "" {
					extra = append(extra, "error: "+e.Error)
				}
				row = append(row, e.State, callString(e), strings.Join(extra, ", "))
			case csAbsent:
				row = append(row, "never entered", "("+f.g.lastCall(r)+")")
			case csPassed:
				row = append(row, "passed", fmt.Sprintf("(its ring has forgotten it: it holds #%d on)", f.g.floor[r]))
			case csUnknown:
				if j.dumps[r] == nil {
					row = append(row, "no dump")
				} else {
					row = append(row, "unknown", "(its full ring holds no call of "+f.g.the()+")")
				}
			}
			rows = append(rows, row)
		}
		writeTable(w, rows)
	}

	if b := rep.blame; b != nil && b.target >= 0 {
		fmt.Fprintln(w, "\nwaits (world ranks; each chain ends at the rank it waits on):")
		for _, a := range b.waiters {
			fmt.Fprintln(w, "  "+chain(b.paths[a]))
		}
		var others []string
		for _, wt := range rep.waits {
			if !slices.Contains(b.waiters, wt.from) && wt.from != b.target {
				others = append(others, fmt.Sprintf("%d -> %d", wt.from, wt.to))
			}
		}
		if len(others) > 0 {
			fmt.Fprintln(w, "  other waits: "+strings.Join(others, ", "))
		}
	}

	var notes []string
	for _, g := range rep.groups {
		type ring struct {
			floor    uint64
			capacity int
		}
		full := map[ring][]int{}
		var order []ring
		for _, r := range g.members {
			if f := g.floor[r]; f > 1 {
				k := ring{f, j.dumps[r].h.Capacity}
				if full[k] == nil {
					order = append(order, k)
				}
				full[k] = append(full[k], r)
			}
		}
		for _, k := range order {
			who := fmt.Sprintf("rank %d's ring is full (%d calls): it holds", full[k][0], k.capacity)
			if len(full[k]) > 1 {
				who = fmt.Sprintf("the rings of ranks %s are full (%d calls): they hold", rankList(full[k]), k.capacity)
			}
			notes = append(notes, fmt.Sprintf("%s %s's calls from #%d on, so a divergence before #%d cannot be seen",
				who, g.the(), k.floor, k.floor))
		}
	}
	for _, r := range sortedKeys(j.dumps) {
		if d := j.dumps[r]; d.warn != "" {
			notes = append(notes, d.warn)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
	}

	fmt.Fprintf(w, "\ndumps (world size %d):\n", j.size)
	var rows [][]string
	for r := range j.size {
		d := j.dumps[r]
		if d == nil {
			rows = append(rows, []string{fmt.Sprintf("rank-%d.jsonl", r), "missing"})
			continue
		}
		ring := plural(len(d.entries), "call")
		if d.h.Capacity > 0 {
			ring += fmt.Sprintf(" (ring of %d)", d.h.Capacity)
		}
		at := ""
		if !d.h.Dumped.IsZero() {
			at = "at " + d.h.Dumped.UTC().Format("15:04:05.000")
		}
		rows = append(rows, []string{d.file, d.h.Reason, at, ring, d.h.Error})
	}
	writeTable(w, rows)
	return problem
}

// writeTable writes rows indented by two spaces, in columns two spaces
// apart, without trailing blanks.
func writeTable(w io.Writer, rows [][]string) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, "  "+strings.Join(row, "\t"))
	}
	tw.Flush()
	for line := range strings.Lines(b.String()) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}
}

// chain writes ranks as "0 -> 1 -> 2".
func chain(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = strconv.Itoa(r)
	}
	return "rank " + strings.Join(s, " -> ")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

func sortedKeys[K int | uint64, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
