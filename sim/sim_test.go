package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/algo/algotest"
)

// allPairs lists every collective and algorithm that implements it.
func allPairs() [][2]any {
	var out [][2]any
	for c := algo.AllReduce; c <= algo.Barrier; c++ {
		for _, a := range algo.Algorithms {
			if Func(c, a) != nil {
				out = append(out, [2]any{c, a})
			}
		}
	}
	return out
}

// TestRealData runs every algorithm with real bytes on small groups of
// awkward sizes and checks the results against the sequential reference.
func TestRealData(t *testing.T) {
	for _, ca := range allPairs() {
		c, a := ca[0].(algo.Collective), ca[1].(algo.Algorithm)
		for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9} {
			for _, count := range []int{0, 1, 7, 64, 1000} {
				for _, hosts := range []int{1, max(1, n/2), n} {
					cfg := Config{Ranks: n, Topology: DefaultTopology(hosts), Gamma: DefaultGamma}
					if _, err := RunCollective(context.Background(), cfg, c, a, 8*count); err != nil {
						t.Errorf("%s %s n=%d count=%d hosts=%d: %v", a, c, n, count, hosts, err)
					}
				}
			}
		}
	}
}

// TestTranscriptGolden checks that the simulator runs the ring allreduce
// unmodified: its transcript is algotest's golden one.
func TestTranscriptGolden(t *testing.T) {
	want, err := os.ReadFile("../testdata/ring_allreduce_4.txt")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Ranks: 4, Topology: DefaultTopology(2), Gamma: DefaultGamma, Record: true}
	res, err := RunCollective(context.Background(), cfg, algo.AllReduce, algo.Ring, 10*8)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := Transcript(&got, res.Events, false); err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("transcript:\n%s\nwant:\n%s", got.String(), want)
	}
	// The same counts as algotest's recording Peers.
	st, err := algotest.World{Size: 4, ElemSize: 8, Reduce: algotest.SumInt64}.Run(context.Background(), func(ctx context.Context, p algo.Peers) error {
		return Func(algo.AllReduce, algo.Ring).(algo.AllReduceFunc)(ctx, p, make([]byte, 80))
	})
	if err != nil {
		t.Fatal(err)
	}
	var msgs, byts int64
	for _, c := range st.Sent {
		msgs += int64(c.Msgs)
		byts += int64(c.Bytes)
	}
	if res.Msgs != msgs || res.Bytes != byts {
		t.Errorf("sim sent %d messages, %d bytes; algotest %d, %d", res.Msgs, res.Bytes, msgs, byts)
	}
}

// TestDeterministic runs the same simulation with 1, 2 and 4 Ps and
// compares every event and time.
func TestDeterministic(t *testing.T) {
	for _, a := range []algo.Algorithm{algo.Ring, algo.Tree, algo.Halving, algo.Doubling} {
		cfg := Config{Ranks: 24, Topology: DefaultTopology(3), Gamma: DefaultGamma, SizeOnly: true, Record: true}
		cfg.Topology.HostsPerLeaf, cfg.Topology.Oversubscription = 2, 2
		var first *Result
		for _, procs := range []int{1, 2, 4} {
			prev := runtime.GOMAXPROCS(procs)
			res, err := RunCollective(context.Background(), cfg, algo.AllReduce, a, 3<<20)
			if err != nil {
				t.Fatal(err)
			}
			runtime.GOMAXPROCS(prev)
			if first == nil {
				first = res
				continue
			}
			if res.Time != first.Time || len(res.Events) != len(first.Events) {
				t.Fatalf("%s: time %g, %d events; first run %g, %d", a, res.Time, len(res.Events), first.Time, len(first.Events))
			}
			for i := range res.Events {
				if res.Events[i] != first.Events[i] {
					t.Fatalf("%s: event %d is %+v, first run %+v", a, i, res.Events[i], first.Events[i])
				}
			}
		}
	}
}

// TestDeadlock: a receive that no one sends ends the run with ErrDeadlock.
func TestDeadlock(t *testing.T) {
	cfg := Config{Ranks: 3, Topology: DefaultTopology(1), ElemSize: 1}
	_, err := Run(context.Background(), cfg, func(ctx context.Context, p algo.Peers) error {
		if p.Rank() == 0 {
			return algo.Recv(ctx, p, 1, make([]byte, 1))
		}
		return nil
	})
	if !errors.Is(err, ErrDeadlock) {
		t.Fatalf("err = %v, want ErrDeadlock", err)
	}
}

// TestRankError: one rank's error ends the others' waits.
func TestRankError(t *testing.T) {
	boom := errors.New("boom")
	cfg := Config{Ranks: 4, Topology: DefaultTopology(1), ElemSize: 1}
	_, err := Run(context.Background(), cfg, func(ctx context.Context, p algo.Peers) error {
		if p.Rank() == 2 {
			return boom
		}
		return algo.Recv(ctx, p, 2, make([]byte, 1))
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

func TestLengthMismatch(t *testing.T) {
	cfg := Config{Ranks: 2, Topology: DefaultTopology(1), ElemSize: 1}
	_, err := Run(context.Background(), cfg, func(ctx context.Context, p algo.Peers) error {
		if p.Rank() == 0 {
			return algo.Send(ctx, p, 1, make([]byte, 3))
		}
		return algo.Recv(ctx, p, 0, make([]byte, 2))
	})
	if !errors.Is(err, ErrLength) {
		t.Fatalf("err = %v, want ErrLength", err)
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cfg := Config{Ranks: 2, Topology: DefaultTopology(1), ElemSize: 1}
	_, err := Run(ctx, cfg, func(ctx context.Context, p algo.Peers) error {
		for i := 0; ; i++ {
			if i == 10 && p.Rank() == 0 {
				cancel()
			}
			if err := algo.Exchange(ctx, p, 1-p.Rank(), []byte{1}, 1-p.Rank(), make([]byte, 1)); err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestWriteTrace(t *testing.T) {
	cfg := Config{Ranks: 4, Topology: DefaultTopology(2), Gamma: DefaultGamma, SizeOnly: true, Record: true}
	res, err := RunCollective(context.Background(), cfg, algo.AllReduce, algo.Ring, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteTrace(&b, TraceRun{Name: "ring allreduce 1 MiB", Ranks: 4, Events: res.Events}, TraceRun{Name: "empty", Ranks: 2}); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name, Ph string
			Tid      int
			Ts, Dur  float64
		}
	}
	if err := json.Unmarshal(b.Bytes(), &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	kinds := map[string]int{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			kinds[strings.Fields(e.Name)[0]]++
			if e.Dur < 0 || e.Ts < 0 || e.Ts+e.Dur > res.Time*1e6+1e-6 {
				t.Errorf("slice %q at %g for %g us outside the run's %g us", e.Name, e.Ts, e.Dur, res.Time*1e6)
			}
		}
	}
	if kinds["send"] != int(res.Msgs) || kinds["recv"] != int(res.Msgs) || kinds["reduce"] == 0 {
		t.Errorf("slices %v for %d messages", kinds, res.Msgs)
	}
}

// TestWrongReducer: a reducer that does nothing must fail the check.
func TestWrongReducer(t *testing.T) {
	cfg := Config{Ranks: 3, Topology: DefaultTopology(1), Reduce: func(dst, src []byte) error { return nil }}
	res, err := RunCollective(context.Background(), cfg, algo.AllReduce, algo.Ring, 80)
	if !errors.Is(err, ErrWrong) {
		t.Fatalf("err = %v, want ErrWrong", err)
	}
	// Every block ends holding one rank's input instead of the sum: all
	// 10 elements are wrong on all 3 ranks.
	if res.Wrong != 3*10 {
		t.Errorf("%d wrong elements, want 30", res.Wrong)
	}
}

// TestLinkSharing checks the network's arithmetic: ranks 0 and 1 (host 0)
// each send m bytes at once to ranks 2 and 3 (host 1). Through one NIC per
// host the two messages share it and both take 2mβ; with two NICs they
// move side by side; across oversubscribed leaf uplinks they share again.
// Two messages of one pair go one after the other.
func TestLinkSharing(t *testing.T) {
	const m = 1 << 20
	inter := Level{Alpha: 5e-6, Beta: 1e-10}
	intra := Level{Alpha: 1e-6, Beta: 1e-11}
	run := func(topo Topology, fn func(ctx context.Context, p algo.Peers) error) []float64 {
		t.Helper()
		cfg := Config{Ranks: 4, ElemSize: 1, Topology: topo, SizeOnly: true}
		res, err := Run(context.Background(), cfg, fn)
		if err != nil {
			t.Fatal(err)
		}
		return res.Finish
	}
	cross := func(ctx context.Context, p algo.Peers) error {
		b := make([]byte, m)
		if p.Rank() < 2 {
			return algo.Send(ctx, p, p.Rank()+2, b)
		}
		return algo.Recv(ctx, p, p.Rank()-2, b)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= want*1e-9 }
	check := func(name string, f []float64, want2, want3 float64) {
		t.Helper()
		if !near(f[2], want2) || !near(f[3], want3) {
			t.Errorf("%s: receivers finish at %g, %g; want %g, %g", name, f[2], f[3], want2, want3)
		}
	}
	one := Topology{Hosts: 2, Intra: intra, Inter: inter}
	check("one NIC", run(one, cross), inter.Alpha+2*m*inter.Beta, inter.Alpha+2*m*inter.Beta)
	two := one
	two.NICs = 2
	check("two NICs", run(two, cross), inter.Alpha+m*inter.Beta, inter.Alpha+m*inter.Beta)
	// One host per leaf, 2 NICs, uplinks oversubscribed 4x: an uplink
	// carries 2 NICs' bandwidth / 4, half a NIC's, shared by two messages.
	fat := two
	fat.HostsPerLeaf, fat.Oversubscription = 1, 4
	check("fat tree", run(fat, cross), inter.Alpha+4*m*inter.Beta, inter.Alpha+4*m*inter.Beta)
	// Within one host every rank has its own ports: no sharing.
	same := Topology{Hosts: 1, Intra: intra, Inter: inter}
	check("one host", run(same, cross), intra.Alpha+m*intra.Beta, intra.Alpha+m*intra.Beta)
	// Rank 0 sends two messages to rank 2: the second starts when the
	// first has left, so they arrive at α + mβ and α + 2mβ.
	cfg := Config{Ranks: 4, ElemSize: 1, Topology: one, SizeOnly: true, Record: true}
	res, err := Run(context.Background(), cfg, func(ctx context.Context, p algo.Peers) error {
		b := make([]byte, m)
		switch p.Rank() {
		case 0:
			return algo.WaitAll(ctx, p.Isend(2, b), p.Isend(2, b))
		case 2:
			return algo.WaitAll(ctx, p.Irecv(0, b), p.Irecv(0, b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var arrivals []float64
	for _, e := range res.Events {
		if e.Kind == Send {
			arrivals = append(arrivals, e.End)
		}
	}
	if len(arrivals) != 2 || !near(arrivals[0], inter.Alpha+m*inter.Beta) || !near(arrivals[1], inter.Alpha+2*m*inter.Beta) {
		t.Errorf("one pair: messages arrive at %v, want %g and %g", arrivals, inter.Alpha+m*inter.Beta, inter.Alpha+2*m*inter.Beta)
	}
}
