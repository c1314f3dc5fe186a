package ring_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
	"github.com/goccl/goccl/algo/ring"
)

var update = flag.Bool("update", false, "rewrite the golden transcripts in testdata")

// Options with tiny segments, so that small test buffers still exercise
// the segment pipeline (24 bytes = 3 int64s; 8 = 1 element).
var variants = map[string]ring.Options{
	"default": {},
	"seg24":   {SegmentBytes: 24},
	"seg1":    {SegmentBytes: 1},
}

func TestAllReduce(t *testing.T) {
	for name, o := range variants {
		if name == "seg1" && testing.Short() {
			continue
		}
		t.Run(name, func(t *testing.T) { algotest.TestAllReduce(t, o.AllReduce) })
	}
}

func TestReduceScatter(t *testing.T) {
	for name, o := range variants {
		if name == "seg1" && testing.Short() {
			continue
		}
		t.Run(name, func(t *testing.T) { algotest.TestReduceScatter(t, o.ReduceScatter) })
	}
}

func TestAllGather(t *testing.T) { algotest.TestAllGather(t, ring.AllGather) }

func TestBroadcast(t *testing.T) {
	for name, o := range variants {
		t.Run(name, func(t *testing.T) { algotest.TestBroadcast(t, o.Broadcast) })
	}
}

func TestPackageFuncs(t *testing.T) {
	var (
		_ algo.AllReduceFunc     = ring.AllReduce
		_ algo.ReduceScatterFunc = ring.ReduceScatter
		_ algo.AllGatherFunc     = ring.AllGather
		_ algo.BroadcastFunc     = ring.Broadcast
	)
	algotest.TestAllReduce(t, ring.AllReduce)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// TestAllReduceCost counts messages and bytes per rank and compares them
// with the doc comment: rank r sends block b ≠ r in ⌈B_b/seg⌉ messages in
// the reduce-scatter and block b ≠ r+1 in one message in the allgather
// (it receives blocks b ≠ r-1, then b ≠ r);
// when n divides the count it sends and receives 2(n-1)/n·N bytes.
func TestAllReduceCost(t *testing.T) {
	for _, seg := range []int{0, 24, 64} {
		o := ring.Options{SegmentBytes: seg}
		segLen := algo.SegmentLen(seg, 8)
		for n := 1; n <= 9; n++ {
			for _, count := range []int{0, 1, n - 1, 13, 72, 1000, 4099} {
				N := 8 * count
				st, err := algotest.World{Size: n, ElemSize: 8, Reduce: algotest.SumInt64}.Run(context.Background(),
					func(ctx context.Context, p algo.Peers) error { return o.AllReduce(ctx, p, make([]byte, N)) })
				if err != nil {
					t.Fatal(err)
				}
				off := algo.Offsets(algo.EvenCounts(count, n), 8)
				for r := range n {
					var msgs, bytes, rmsgs, rbytes int
					for b := range n {
						B := off[b+1] - off[b]
						if b != r {
							msgs += ceilDiv(B, segLen)
							bytes += B
						}
						if b != (r+n-1)%n {
							rmsgs += ceilDiv(B, segLen)
							rbytes += B
						}
						if b != (r+1)%n && B > 0 {
							msgs++
							bytes += B
						}
						if b != r && B > 0 {
							rmsgs++
							rbytes += B
						}
					}
					if n == 1 {
						msgs, bytes, rmsgs, rbytes = 0, 0, 0, 0
					}
					if got := st.Sent[r]; got.Msgs != msgs || got.Bytes != bytes {
						t.Errorf("seg=%d n=%d count=%d rank %d: sent %+v, want %d msgs %d bytes", seg, n, count, r, got, msgs, bytes)
					}
					if got := st.Recv[r]; got.Msgs != rmsgs || got.Bytes != rbytes {
						t.Errorf("seg=%d n=%d count=%d rank %d: received %+v, want %d msgs %d bytes", seg, n, count, r, got, rmsgs, rbytes)
					}
					if count%n == 0 && st.Sent[r].Bytes*n != 2*(n-1)*N {
						t.Errorf("n=%d count=%d rank %d: sent %d bytes, want 2(n-1)/n·N = %d/%d", n, count, r, st.Sent[r].Bytes, 2*(n-1)*N, n)
					}
					if count%n == 0 && count >= n && seg == 0 && st.Sent[r].Msgs != 2*(n-1) {
						t.Errorf("n=%d count=%d rank %d: sent %d messages, want 2(n-1)", n, count, r, st.Sent[r].Msgs)
					}
				}
			}
		}
	}
}

// TestBroadcastCost: the root sends S = ⌈N/seg⌉ messages, the chain's last
// rank receives S, the others receive and send S; N bytes each way.
func TestBroadcastCost(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for _, count := range []int{0, 1, 5, 100} {
			for root := range n {
				o := ring.Options{SegmentBytes: 32}
				N := 8 * count
				st, err := algotest.World{Size: n, ElemSize: 8}.Run(context.Background(),
					func(ctx context.Context, p algo.Peers) error { return o.Broadcast(ctx, p, make([]byte, N), root) })
				if err != nil {
					t.Fatal(err)
				}
				S := ceilDiv(N, 32)
				for r := range n {
					v := (r - root + n) % n
					want := [2]algotest.Count{{Msgs: S, Bytes: N}, {Msgs: S, Bytes: N}} // sent, received
					if v == 0 {
						want[1] = algotest.Count{}
					}
					if v == n-1 {
						want[0] = algotest.Count{}
					}
					if got := [2]algotest.Count{st.Sent[r], st.Recv[r]}; got != want {
						t.Errorf("n=%d count=%d root=%d rank %d: sent, received %+v, want %+v", n, count, root, r, got, want)
					}
				}
			}
		}
	}
}

const golden = "../../testdata/ring_allreduce_4.txt"

// TestGoldenTranscript records who sends how many bytes to whom, step by
// step, for a 4-rank allreduce of 10 int64s, and compares it with
// testdata/ring_allreduce_4.txt and with the picture in allreduce.go's doc
// comment. Run with -update to rewrite the file.
func TestGoldenTranscript(t *testing.T) {
	st, err := algotest.World{Size: 4, ElemSize: 8, Reduce: algotest.SumInt64, Record: true}.Run(context.Background(),
		func(ctx context.Context, p algo.Peers) error { return ring.AllReduce(ctx, p, make([]byte, 80)) })
	if err != nil {
		t.Fatal(err)
	}
	got := st.TranscriptText()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("transcript differs from %s (run with -update to accept):\n%s", filepath.Base(golden), got)
	}
	src, err := os.ReadFile("allreduce.go")
	if err != nil {
		t.Fatal(err)
	}
	var doc strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		if s, ok := strings.CutPrefix(line, "//\t"); ok && strings.HasPrefix(s, "step ") && strings.Contains(s, ": rank ") {
			doc.WriteString(s + "\n")
		}
	}
	if doc.String() != got {
		t.Errorf("the transcript in allreduce.go's doc comment differs from the recorded one:\n%s", got)
	}
}

func BenchmarkAllReduce1MiB4(b *testing.B) {
	const size = 1 << 20
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	b.SetBytes(size)
	for b.Loop() {
		err := algotest.Run(4, 8, algotest.SumFloat64, func(ctx context.Context, p algo.Peers) error {
			return ring.AllReduce(ctx, p, bufs[p.Rank()])
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleAllReduce() {
	out := make([][]int64, 4)
	err := algotest.Run(4, 8, algotest.SumInt64, func(ctx context.Context, p algo.Peers) error {
		r := int64(p.Rank())
		buf := algotest.Int64Bytes([]int64{r, 10 * r, 100 * r})
		if err := ring.AllReduce(ctx, p, buf); err != nil {
			return err
		}
		out[p.Rank()] = algotest.Int64s(buf)
		return nil
	})
	fmt.Println(out, err)
	// Output: [[6 60 600] [6 60 600] [6 60 600] [6 60 600]] <nil>
}

// pieced runs fn on a copy of buf cut into separate pieces (algo.Vec) at
// element boundaries that depend only on len(buf), so that every rank
// cuts alike, and copies the result back: the Vec forms must give what
// the flat ones give, for any cut.
func pieced(p algo.Peers, buf []byte, fn func(v algo.Vec) error) error {
	es := p.ElemSize()
	var parts [][]byte
	seed := uint64(len(buf))*2654435761 + 1
	for off := 0; off < len(buf); {
		seed = seed*6364136223846793005 + 1442695040888963407
		n := min(int(seed>>33)%5*es, len(buf)-off) // 0 to 4 elements: empty pieces too
		parts = append(parts, append([]byte(nil), buf[off:off+n]...))
		off += n
	}
	if err := fn(algo.Pieces(parts)); err != nil {
		return err
	}
	off := 0
	for _, b := range parts {
		off += copy(buf[off:], b)
	}
	return nil
}

func TestAllReduceVec(t *testing.T) {
	for name, o := range variants {
		t.Run(name, func(t *testing.T) {
			algotest.TestAllReduce(t, func(ctx context.Context, p algo.Peers, buf []byte) error {
				return pieced(p, buf, func(v algo.Vec) error { return o.AllReduceVec(ctx, p, v) })
			})
		})
	}
}

func TestAllGatherVec(t *testing.T) {
	algotest.TestAllGather(t, func(ctx context.Context, p algo.Peers, buf []byte, counts []int) error {
		return pieced(p, buf, func(v algo.Vec) error { return ring.Options{}.AllGatherVec(ctx, p, v, counts) })
	})
}

// A Vec of one piece sends what the flat buffer sends: the transcript of
// AllReduceVec over Flat is the golden one of AllReduce.
func TestAllReduceVecFlatTranscript(t *testing.T) {
	run := func(fn func(ctx context.Context, p algo.Peers, buf []byte) error) string {
		w := algotest.World{Size: 4, ElemSize: 8, Reduce: algotest.SumInt64, Record: true}
		st, err := w.Run(context.Background(), func(ctx context.Context, p algo.Peers) error {
			return fn(ctx, p, make([]byte, 10*8))
		})
		if err != nil {
			t.Fatal(err)
		}
		return st.TranscriptText()
	}
	flat := run(ring.AllReduce)
	if len(flat) == 0 {
		t.Fatal("no transcript recorded")
	}
	vec := run(func(ctx context.Context, p algo.Peers, buf []byte) error {
		return ring.Options{}.AllReduceVec(ctx, p, algo.Flat(buf))
	})
	if flat != vec {
		t.Fatalf("AllReduceVec(Flat) sends\n%s\nAllReduce sends\n%s", vec, flat)
	}
}
