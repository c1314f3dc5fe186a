package commslog

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the DeepSpeed style. Its numbers follow DeepSpeed's
// deepspeed/utils/comms_logging.py (convert_size, calc_bw_log,
// CommsLogger.append and CommsLogger.log_all, which
// deepspeed.comm.log_summary calls) and deepspeed/comm/utils.py
// (get_msg_size_from_args), down to the order of the float operations, so
// that the printed figures are the ones DeepSpeed prints for the same
// latencies.

// dsRule is how calc_bw_log turns a message size into tput and busbw.
type dsRule uint8

const (
	dsPlain     dsRule = iota // send, recv, broadcast, reduce, gather, scatter, barrier: tput = busbw = size/t
	dsAllToAll                // all_to_all_single: tput = size/t, busbw = tput*(n-1)/n
	dsAllGather               // all_gather, reduce_scatter (+ _tensor): size *= n, then as all-to-all
	dsAllReduce               // all_reduce (+ coalesced, inference): tput = 2*size/t, busbw = size/t*2(n-1)/n
)

// dsOp returns op's rule and whether DeepSpeed's msg_size for it is one
// rank's share of the record's nccl-tests size (the tensor argument that
// get_msg_size_from_args reads is the per-rank input of an all-gather or a
// gather, or the per-rank output of a scatter).
func dsOp(op string) (rule dsRule, share bool) {
	switch op {
	case AllReduce, AllReduceCoalesced, InferenceAllReduce:
		return dsAllReduce, false
	case AllGather, AllGatherIntoTensor:
		return dsAllGather, true
	case AllGatherCoalesced: // not logged by DeepSpeed: taken as all_gather
		return dsAllGather, true
	case ReduceScatter, ReduceScatterTensor:
		return dsAllGather, false
	case AllToAllSingle, AllToAll: // all_to_all is not logged by DeepSpeed: taken as all_to_all_single
		return dsAllToAll, false
	case Gather, Scatter:
		return dsPlain, true
	}
	// send, recv, isend, irecv, broadcast, reduce, barrier; and, where
	// DeepSpeed's calc_bw_log stops the program ("wrong comm_op
	// specified"), monitored_barrier, the object ops and unknown names.
	return dsPlain, false
}

// DeepSpeedMsgSize returns the message size DeepSpeed logs for a record of
// op with nccl-tests size bytes on n ranks: the size of the tensor argument
// deepspeed.comm reads (get_msg_size_from_args). That is bytes except for
// all_gather, all_gather_into_tensor (and all_gather_coalesced), gather and
// scatter, where it is one rank's part, bytes/n. Note that for
// reduce_scatter it is the whole input, and calc_bw_log multiplies it by n
// again. n < 1 counts as 1.
func DeepSpeedMsgSize(op string, bytes int64, n int) int64 {
	if _, share := dsOp(op); share && n > 1 {
		return bytes / int64(n)
	}
	return bytes
}

// DeepSpeedBW returns DeepSpeed's tput and busbw in Gbps (calc_bw_log) for
// a message of msgSize bytes as DeepSpeed counts it (DeepSpeedMsgSize) that
// took latency on n ranks:
//
//	all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor:
//	  size *= n; tput = size/t; busbw = tput * (n-1)/n
//	all_to_all_single: tput = size/t; busbw = tput * (n-1)/n
//	all_reduce, all_reduce_coalesced, inference_all_reduce:
//	  tput = 2*size/t; busbw = size/t * 2(n-1)/n
//	send, recv, isend, irecv, broadcast, reduce, gather, scatter, barrier:
//	  tput = busbw = size/t
//
// then both times 8 and divided by 10^6, t being in milliseconds. Ops that
// DeepSpeed cannot log (it exits) take the nearest rule: all_gather_coalesced
// that of all_gather, all_to_all that of all_to_all_single, everything else
// size/t. A latency that is not positive gives 0, 0 (DeepSpeed would divide
// by zero). n < 1 counts as 1.
func DeepSpeedBW(op string, msgSize int64, latency time.Duration, n int) (tput, busbw float64) {
	if latency <= 0 {
		return 0, 0
	}
	if n < 1 {
		n = 1
	}
	d := ms64(latency)
	rule, _ := dsOp(op)
	size := msgSize
	switch rule {
	case dsAllGather:
		size *= int64(n)
		fallthrough
	case dsAllToAll:
		tput = float64(size) / d
		busbw = (float64(size) / d) * (float64(n-1) / float64(n))
	case dsAllReduce:
		tput = float64(size*2) / d
		busbw = (float64(size) / d) * (float64(2*(n-1)) / float64(n))
	default:
		tput = float64(size) / d
		busbw = tput
	}
	tput *= 8
	busbw *= 8
	tput /= 1e6
	busbw /= 1e6
	return tput, busbw
}

// ms64 is d in milliseconds, DeepSpeed's unit of latency.
func ms64(d time.Duration) float64 { return float64(d) / 1e6 }

// DeepSpeedVerboseLine is the line DeepSpeed's CommsLogger.append logs for
// r with verbose on:
//
//	comm op: all_reduce | time (ms): 10.00 | msg size: 4.0 MB | algbw (Gbps): 6.71 | busbw (Gbps): 5.03
//
// Its log_dist puts "[Rank 0] " in front, and a Verbose logger in the
// DeepSpeed style does too. The op is Record.Name (with the caller in debug
// mode); sizes and bandwidths are DeepSpeedMsgSize and DeepSpeedBW.
func DeepSpeedVerboseLine(r Record) string {
	size := DeepSpeedMsgSize(r.Op, r.Bytes, r.WorldSize)
	tput, busbw := DeepSpeedBW(r.Op, size, r.Latency, r.WorldSize)
	return "comm op: " + r.Name() +
		" | time (ms): " + f2(ms64(r.Latency)) +
		" | msg size: " + ConvertSize(size) +
		" | algbw (Gbps): " + f2(tput) +
		" | busbw (Gbps): " + f2(busbw)
}

// f2 is Python's format(x, ".2f"): correctly rounded, ties to even on the
// exact binary value.
func f2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }

// DeepSpeedRow is one line of DeepSpeed's summary: the records of one
// record name and one DeepSpeed message size, in DeepSpeed's units.
type DeepSpeedRow struct {
	Name         string  // Record.Name: the op, with the caller in debug mode
	MsgSize      int64   // DeepSpeedMsgSize
	Count        int     // number of records
	TotalLatency float64 // ms, the sum of the latencies
	AvgLatency   float64 // ms, trimmed mean (DeepSpeedTrimMean)
	TputAvg      float64 // Gbps, trimmed mean of DeepSpeedBW's tput
	BusBWAvg     float64 // Gbps, trimmed mean of DeepSpeedBW's busbw
}

// dsGroup is the records of one row, as CommsLogger keeps them.
type dsGroup struct {
	name       string
	size       int64
	lat        []float64 // ms, in the order appended
	tput, busb []float64
}

// dsGroups groups recs as CommsLogger.comms_dict does: record names in the
// order they first appear, sizes within a name in increasing order (as
// log_all sorts them).
func dsGroups(recs []Record) []*dsGroup {
	type key struct {
		name string
		size int64
	}
	var names []string
	byName := map[string][]*dsGroup{}
	index := map[key]*dsGroup{}
	for _, r := range recs {
		name := r.Name()
		size := DeepSpeedMsgSize(r.Op, r.Bytes, r.WorldSize)
		k := key{name, size}
		g := index[k]
		if g == nil {
			if _, ok := byName[name]; !ok {
				names = append(names, name)
			}
			g = &dsGroup{name: name, size: size}
			index[k] = g
			byName[name] = append(byName[name], g)
		}
		tput, busbw := DeepSpeedBW(r.Op, size, r.Latency, r.WorldSize)
		g.lat = append(g.lat, ms64(r.Latency))
		g.tput = append(g.tput, tput)
		g.busb = append(g.busb, busbw)
	}
	var out []*dsGroup
	for _, n := range names {
		gs := byName[n]
		slices.SortFunc(gs, func(a, b *dsGroup) int { return int(sign(a.size - b.size)) })
		out = append(out, gs...)
	}
	return out
}

// SummarizeDeepSpeed groups records as DeepSpeed's comms logger does: by
// record name in the order the names first appear, then by DeepSpeed's
// message size in increasing order. Totals are Python's sum of the
// latencies in milliseconds; averages are DeepSpeedTrimMean.
func SummarizeDeepSpeed(recs []Record) []DeepSpeedRow {
	gs := dsGroups(recs)
	rows := make([]DeepSpeedRow, len(gs))
	for i, g := range gs {
		rows[i] = DeepSpeedRow{
			Name: g.name, MsgSize: g.size, Count: len(g.lat),
			TotalLatency: pySum(g.lat),
			AvgLatency:   DeepSpeedTrimMean(g.lat),
			TputAvg:      DeepSpeedTrimMean(g.tput),
			BusBWAvg:     DeepSpeedTrimMean(g.busb),
		}
	}
	return rows
}

// DeepSpeedTrimMean is DeepSpeed's trim_mean(xs, 0.1)
// (deepspeed/utils/timer.py): it sorts a copy, drops k = round(0.1*len)
// values at each end (Python's round: halves to even) and returns numpy's
// mean of the rest (pairwise summation, then one division). It returns 0
// for no values and does not change xs.
func DeepSpeedTrimMean(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(math.RoundToEven(float64(n) * 0.1))
	s = s[k : n-k]
	if len(s) == 0 {
		return math.NaN() // numpy's mean of nothing; k <= n/2 keeps this out of reach
	}
	return numpySum(s) / float64(len(s))
}

// numpySum adds xs as numpy's float64 add.reduce does (pairwise_sum in
// numpy/core/src/umath/loops_utils.h.src): blocks of up to 128 values with
// eight accumulators, halved above that.
func numpySum(a []float64) float64 {
	n := len(a)
	switch {
	case n < 8:
		res := 0.0
		for _, x := range a {
			res += x
		}
		return res
	case n <= 128:
		var r [8]float64
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := range r {
				r[j] += a[i+j]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	}
	n2 := n / 2
	n2 -= n2 % 8
	return numpySum(a[:n2]) + numpySum(a[n2:])
}

// pySum adds xs as Python 3.12's sum() adds floats: in order, with
// Neumaier's compensation. (Python 3.11 and older add plainly; the two
// differ in the last bits only, which a two-decimal total does not show
// but in rare ties.)
func pySum(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	f, c := xs[0], 0.0
	for _, x := range xs[1:] {
		t := f + x
		if math.Abs(f) >= math.Abs(x) {
			c += (f - t) + x
		} else {
			c += (x - t) + f
		}
		f = t
	}
	if c != 0 && !math.IsInf(c, 0) && !math.IsNaN(c) {
		f += c
	}
	return f
}

// dsCol is the width of DeepSpeed's columns.
const dsCol = 20

// dsLine writes cells as Python's f"{cell: <20}" does, one after another:
// each padded with spaces to 20 characters (the last one too), none cut.
func dsLine(w *bufio.Writer, cells ...string) {
	for _, c := range cells {
		w.WriteString(c)
		for i := len(c); i < dsCol; i++ {
			w.WriteByte(' ')
		}
	}
	w.WriteByte('\n')
}

// WriteDeepSpeedSummary writes rows as DeepSpeed's log_summary prints them
// (CommsLogger.log_all): the header
//
//	Comm. Op  Message Size  Count  Total Latency(ms)  Avg Latency(ms)  tput_avg (Gbps)  busbw_avg (Gbps)
//
// in columns 20 characters wide, then each record name on a line of its
// own followed by one line per message size: an empty first column, the
// size (ConvertSize), the count, and the four figures with two decimals.
// Every cell, the last included, is padded to 20 characters, as DeepSpeed's
// format strings do.
func WriteDeepSpeedSummary(w io.Writer, rows []DeepSpeedRow) error {
	bw := bufio.NewWriter(w)
	dsLine(bw, "Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)")
	for i, r := range rows {
		if i == 0 || rows[i-1].Name != r.Name {
			bw.WriteString(r.Name)
			bw.WriteByte('\n')
		}
		dsLine(bw, " ", ConvertSize(r.MsgSize), strconv.Itoa(r.Count), f2(r.TotalLatency), f2(r.AvgLatency), f2(r.TputAvg), f2(r.BusBWAvg))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("commslog: write summary: %w", err)
	}
	return nil
}

// DeepSpeedStragglerRow is one line of DeepSpeed's "Breakdown with
// straggler effect", in milliseconds: for one record name and message
// size, with min the latencies' minimum over the ranks, call by call.
type DeepSpeedStragglerRow struct {
	Name           string
	MsgSize        int64
	Count          int
	TotalCommLat   float64 // sum of min
	TotalStraggler float64 // sum of this rank's latencies minus min
	AvgCommLat     float64 // DeepSpeedTrimMean of min
	AvgStraggler   float64 // DeepSpeedTrimMean of latencies minus min
}

// DeepSpeedStraggler computes DeepSpeed's straggler breakdown
// (CommsLogger.log_all with show_straggler): for each summary row, the
// latencies' minimum over the ranks, call by call, and this rank's excess
// over it. DeepSpeed finds the minimum with one all_reduce(MIN) per row of
// float32 tensors; goccl does the same arithmetic in float32 (sums in
// order) over two allgathers of g, run under Internal(ctx): one to check
// that every rank logged the same rows with the same counts (DeepSpeed
// needs that too, or its all_reduces mismatch), one for the latencies. It
// is a collective: every rank of g must call it.
func DeepSpeedStraggler(ctx context.Context, g Gatherer, recs []Record) ([]DeepSpeedStragglerRow, error) {
	n := g.Size()
	if n < 1 {
		return nil, fmt.Errorf("commslog: straggler rank %d: group size %d", g.Rank(), n)
	}
	ctx = Internal(ctx)
	gs := dsGroups(recs)
	h := fnv.New64a()
	var lats []float64
	for _, gr := range gs {
		fmt.Fprintf(h, "%q %d %d\n", gr.name, gr.size, len(gr.lat))
		lats = append(lats, gr.lat...)
	}
	sum := h.Sum64()
	head := []float64{float64(len(lats)), float64(sum >> 32), float64(sum & 0xffffffff)}
	all := make([]float64, n*len(head))
	if err := g.AllGather(ctx, head, all); err != nil {
		return nil, fmt.Errorf("commslog: straggler allgather rank %d: %w", g.Rank(), err)
	}
	for r := range n {
		if !slices.Equal(all[r*len(head):(r+1)*len(head)], head) {
			return nil, fmt.Errorf("commslog: straggler rank %d: rank %d logged other ops, sizes or counts than this rank; the DeepSpeed breakdown needs the same calls on every rank", g.Rank(), r)
		}
	}
	mins := make([]float32, len(lats))
	for i, v := range lats {
		mins[i] = float32(v)
	}
	if len(lats) > 0 {
		every := make([]float64, n*len(lats))
		if err := g.AllGather(ctx, lats, every); err != nil {
			return nil, fmt.Errorf("commslog: straggler allgather rank %d: %w", g.Rank(), err)
		}
		for r := range n {
			for i, v := range every[r*len(lats) : (r+1)*len(lats)] {
				mins[i] = min(mins[i], float32(v))
			}
		}
	}
	rows := make([]DeepSpeedStragglerRow, len(gs))
	off := 0
	for i, gr := range gs {
		c := len(gr.lat)
		var total, straggle float32
		mn := make([]float64, c)
		ex := make([]float64, c)
		for j := range c {
			m := mins[off+j]
			e := float32(gr.lat[j]) - m
			total += m
			straggle += e
			mn[j], ex[j] = float64(m), float64(e)
		}
		off += c
		rows[i] = DeepSpeedStragglerRow{
			Name: gr.name, MsgSize: gr.size, Count: c,
			TotalCommLat: float64(total), TotalStraggler: float64(straggle),
			AvgCommLat: DeepSpeedTrimMean(mn), AvgStraggler: DeepSpeedTrimMean(ex),
		}
	}
	return rows, nil
}

// WriteDeepSpeedStraggler writes rows as DeepSpeed prints its straggler
// breakdown: a rule, "Breakdown with straggler effect", a rule, then a
// table laid out as WriteDeepSpeedSummary's with the columns Total comm
// lat(ms), Total straggler(ms), Avg comm lat(ms) and Avg straggler(ms).
func WriteDeepSpeedStraggler(w io.Writer, rows []DeepSpeedStragglerRow) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(strings.Repeat("_", 31) + "\nBreakdown with straggler effect\n" + strings.Repeat("-", 31) + "\n")
	dsLine(bw, "Comm. Op", "Message Size", "Count", "Total comm lat(ms)", "Total straggler(ms)", "Avg comm lat(ms)", "Avg straggler(ms)")
	for i, r := range rows {
		if i == 0 || rows[i-1].Name != r.Name {
			bw.WriteString(r.Name)
			bw.WriteByte('\n')
		}
		dsLine(bw, " ", ConvertSize(r.MsgSize), strconv.Itoa(r.Count), f2(r.TotalCommLat), f2(r.TotalStraggler), f2(r.AvgCommLat), f2(r.AvgStraggler))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("commslog: write straggler table: %w", err)
	}
	return nil
}
