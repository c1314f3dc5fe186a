package commslog

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
)

// Gatherer is the one collective the straggler report needs: an allgather.
// Straggler calls AllGather with send a []float64 of the same length on
// every rank and recv a []float64 of Size()*len(send) values, which must
// receive rank r's values at [r*len(send), (r+1)*len(send)). *goccl.Comm
// is a Gatherer.
type Gatherer interface {
	Rank() int
	Size() int
	AllGather(ctx context.Context, send, recv any) error
}

// StragglerRow is the straggler effect of one op: how much longer each rank
// spent in it, in total, than the fastest rank.
type StragglerRow struct {
	Op          string
	Count       int             // this rank's number of records of Op
	Latency     []time.Duration // total latency of Op on each rank
	FastestRank int             // the rank with the least total latency
	Effect      []time.Duration // Latency[r] - Latency[FastestRank]
}

// OtherOps is the StragglerRow.Op that groups records whose op name is not
// one of OpNames.
const OtherOps = "other"

// Straggler finds, for each op any rank has records of, each rank's total
// latency minus the fastest rank's. It is a collective: every rank of g
// must call it, each with its own records (those of the communicator g
// stands for). The ranks lay their totals out in the order of OpNames, so
// they agree without exchanging names. Rows come in that order. Its
// allgather runs under Internal(ctx), so that a communicator does not log
// it as the user's.
func Straggler(ctx context.Context, g Gatherer, recs []Record) ([]StragglerRow, error) {
	names := append(OpNames(), OtherOps)
	index := make(map[string]int, len(names))
	for i, n := range names {
		index[n] = i
	}
	// Per op: total latency in nanoseconds, then the count.
	send := make([]float64, 2*len(names))
	for _, r := range recs {
		i, ok := index[r.Op]
		if !ok || r.Op == OtherOps {
			i = len(names) - 1
		}
		send[2*i] += float64(r.Latency)
		send[2*i+1]++
	}
	n := g.Size()
	if n < 1 {
		return nil, fmt.Errorf("commslog: straggler rank %d: group size %d", g.Rank(), n)
	}
	recv := make([]float64, n*len(send))
	if err := g.AllGather(Internal(ctx), send, recv); err != nil {
		return nil, fmt.Errorf("commslog: straggler allgather rank %d: %w", g.Rank(), err)
	}
	var rows []StragglerRow
	for i, name := range names {
		seen := false
		for r := 0; r < n; r++ {
			if recv[r*len(send)+2*i+1] > 0 {
				seen = true
				break
			}
		}
		if !seen {
			continue
		}
		row := StragglerRow{Op: name, Count: int(send[2*i+1]), Latency: make([]time.Duration, n), Effect: make([]time.Duration, n)}
		for r := 0; r < n; r++ {
			row.Latency[r] = time.Duration(recv[r*len(send)+2*i])
			if row.Latency[r] < row.Latency[row.FastestRank] {
				row.FastestRank = r
			}
		}
		for r := 0; r < n; r++ {
			row.Effect[r] = row.Latency[r] - row.Latency[row.FastestRank]
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// WriteStraggler writes rows as a table seen from rank: its count and total
// latency, the fastest rank's total, its straggler effect (the difference),
// and the slowest rank with its effect.
func WriteStraggler(w io.Writer, rows []StragglerRow, rank int) error {
	header := []string{"Comm. Op", "Count", "Total Latency(ms)", "Fastest(ms)", "Straggler(ms)", "Slowest Rank", "Max Straggler(ms)"}
	groups := make([]string, len(rows))
	cells := make([][][]string, len(rows))
	for i, r := range rows {
		groups[i] = r.Op
		slow := 0
		for j := range r.Effect {
			if r.Effect[j] > r.Effect[slow] {
				slow = j
			}
		}
		var mine time.Duration
		var eff time.Duration
		if rank >= 0 && rank < len(r.Latency) {
			mine, eff = r.Latency[rank], r.Effect[rank]
		}
		cells[i] = [][]string{{
			strconv.Itoa(r.Count), ms(mine), ms(r.Latency[r.FastestRank]), ms(eff),
			strconv.Itoa(slow), ms(r.Effect[slow]),
		}}
	}
	if err := writeTable(w, header, groups, cells); err != nil {
		return fmt.Errorf("commslog: write straggler table: %w", err)
	}
	return nil
}

// LogSummary writes the summary table and, when straggler or
// Config.Straggler is set, the straggler table after it. The straggler
// table is found with an allgather over g, so then every rank of g must
// call LogSummary with the same setting; g may be nil otherwise. Every
// rank writes to its w; pass io.Discard on ranks that should stay quiet.
//
// In StyleDeepSpeed both tables are DeepSpeed's: its summary, then its
// "Breakdown with straggler effect" (see DeepSpeedStraggler).
func (l *Logger) LogSummary(ctx context.Context, w io.Writer, g Gatherer, straggler bool) error {
	recs := l.Records()
	cfg := l.Config()
	ds := cfg.Style == StyleDeepSpeed
	var err error
	if ds {
		err = WriteDeepSpeedSummary(w, SummarizeDeepSpeed(recs))
	} else {
		err = WriteSummary(w, Summarize(recs), cfg.Units)
	}
	if err != nil {
		return err
	}
	if !straggler && !cfg.Straggler {
		return nil
	}
	if g == nil {
		return fmt.Errorf("commslog: straggler report needs a Gatherer")
	}
	if ds {
		rows, err := DeepSpeedStraggler(ctx, g, recs)
		if err != nil {
			return err
		}
		return WriteDeepSpeedStraggler(w, rows)
	}
	rows, err := Straggler(ctx, g, recs)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, "\nStraggler effect (this rank's total latency minus the fastest rank's)\n"); err != nil {
		return fmt.Errorf("commslog: write straggler table: %w", err)
	}
	return WriteStraggler(w, rows, g.Rank())
}
