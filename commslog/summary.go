package commslog

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Row is one line of the summary: every record of one op name (Record.Name)
// and one message size.
type Row struct {
	Name         string        // op name, with the caller in debug mode
	Bytes        int64         // message size
	Count        int           // number of records
	TotalLatency time.Duration // sum of the latencies
	AvgLatency   time.Duration // trimmed mean of the latencies
	AvgAlgBW     float64       // trimmed mean of AlgBW, bytes/s
	AvgBusBW     float64       // trimmed mean of BusBW, bytes/s
}

// TrimFraction is the share of values dropped at each end before the
// summary averages, as DeepSpeed does.
const TrimFraction = 0.1

// Summarize groups records by op name and message size, sorted by name and
// then size. Each average drops floor(Count*TrimFraction) of the smallest
// and of the largest values first (none below 10 records; DeepSpeed
// rounds instead, see SummarizeDeepSpeed).
func Summarize(recs []Record) []Row {
	type key struct {
		name  string
		bytes int64
	}
	groups := map[key][]Record{}
	for _, r := range recs {
		k := key{r.Name(), r.Bytes}
		groups[k] = append(groups[k], r)
	}
	rows := make([]Row, 0, len(groups))
	for k, g := range groups {
		lat := make([]float64, len(g))
		alg := make([]float64, len(g))
		bus := make([]float64, len(g))
		var total time.Duration
		for i, r := range g {
			total += r.Latency
			lat[i] = float64(r.Latency)
			alg[i] = r.AlgBW
			bus[i] = r.BusBW
		}
		rows = append(rows, Row{
			Name: k.name, Bytes: k.bytes, Count: len(g), TotalLatency: total,
			AvgLatency: time.Duration(math.Round(TrimmedMean(lat, TrimFraction))),
			AvgAlgBW:   TrimmedMean(alg, TrimFraction),
			AvgBusBW:   TrimmedMean(bus, TrimFraction),
		})
	}
	slices.SortFunc(rows, func(a, b Row) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return int(sign(a.Bytes - b.Bytes))
	})
	return rows
}

func sign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

// TrimmedMean returns the mean of xs after dropping floor(len*frac) values
// at each end of the sorted order. It does not change xs. It returns 0 for
// no values, and keeps at least the middle value (two for an even count) whatever
// frac is.
func TrimmedMean(xs []float64, frac float64) float64 {
	n := len(xs)
	if n == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(float64(n) * frac)
	if k < 0 {
		k = 0
	}
	if n-2*k < 1 {
		k = (n - 1) / 2
	}
	s = s[k : n-k]
	var sum float64
	for _, x := range s {
		sum += x
	}
	return sum / float64(len(s))
}

// ConvertSize writes a byte count for people as DeepSpeed's convert_size
// does (deepspeed/utils/comms_logging.py): in powers of 1024 chosen by
// floor(log(n)/log(1024)), the value rounded to two decimals as Python's
// round, then printed as Python prints a float: 0 -> "0B", 1536 ->
// "1.5 KB", 4<<20 -> "4.0 MB", 1023 -> "1023.0 B". A negative count (which
// DeepSpeed cannot print) gets a minus sign.
func ConvertSize(n int64) string {
	if n == 0 {
		return "0B"
	}
	neg := n < 0
	u := float64(n) // correctly rounded, as Python's int-to-float
	if neg {
		u = -u
	}
	names := [...]string{"B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"}
	i := int(math.Floor(math.Log(u) / math.Log(1024)))
	i = max(0, min(i, len(names)-1))
	s := pyFloat(pyRound2(u / math.Ldexp(1, 10*i)))
	if neg {
		s = "-" + s
	}
	return s + " " + names[i]
}

// pyRound2 is Python's round(x, 2): x correctly rounded to two decimals,
// ties to even on x's exact binary value, read back as the nearest float.
func pyRound2(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 2, 64), 64)
	return v
}

// pyFloat prints x as Python's str(float) does for values between 1e-4 and
// 1e16: the shortest digits that read back as x, with ".0" when whole.
func pyFloat(x float64) string {
	if x != 0 && (math.Abs(x) >= 1e16 || math.Abs(x) < 1e-4) {
		return strconv.FormatFloat(x, 'g', -1, 64) // not reached by sizes
	}
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

const colWidth = 20

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }

func bw(u Units, v float64) string { return strconv.FormatFloat(u.Convert(v), 'f', 2, 64) }

// writeTable writes a header and rows in columns colWidth wide, the first
// cell of each group on its own line as DeepSpeed lays it out.
func writeTable(w io.Writer, header []string, groups []string, rows [][][]string) error {
	bw := bufio.NewWriter(w)
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i < len(cells)-1 {
				fmt.Fprintf(&b, "%-*s", colWidth, c)
			} else {
				b.WriteString(c)
			}
		}
		bw.WriteString(strings.TrimRight(b.String(), " "))
		bw.WriteByte('\n')
	}
	line(header)
	for i, g := range groups {
		line([]string{g})
		for _, r := range rows[i] {
			line(append([]string{""}, r...))
		}
	}
	return bw.Flush()
}

// WriteSummary writes rows as a table, one block per op name with one line
// per message size: count, total and average latency in milliseconds, and
// average algbw and busbw in u.
func WriteSummary(w io.Writer, rows []Row, u Units) error {
	header := []string{"Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
		"algbw_avg (" + u.String() + ")", "busbw_avg (" + u.String() + ")"}
	var groups []string
	var cells [][][]string
	for _, r := range rows {
		if len(groups) == 0 || groups[len(groups)-1] != r.Name {
			groups = append(groups, r.Name)
			cells = append(cells, nil)
		}
		cells[len(cells)-1] = append(cells[len(cells)-1], []string{
			ConvertSize(r.Bytes), strconv.Itoa(r.Count), ms(r.TotalLatency), ms(r.AvgLatency),
			bw(u, r.AvgAlgBW), bw(u, r.AvgBusBW),
		})
	}
	if err := writeTable(w, header, groups, cells); err != nil {
		return fmt.Errorf("commslog: write summary: %w", err)
	}
	return nil
}

// WriteSummary writes the summary of this rank's records in the Config's
// Style (and, for nccl-tests, its Units). It is local: it talks to no
// other rank. A nil logger writes the header only.
func (l *Logger) WriteSummary(w io.Writer) error {
	cfg := l.Config()
	if cfg.Style == StyleDeepSpeed {
		return WriteDeepSpeedSummary(w, SummarizeDeepSpeed(l.Records()))
	}
	return WriteSummary(w, Summarize(l.Records()), cfg.Units)
}
