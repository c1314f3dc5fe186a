package goccl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/algo"
	"github.com/goccl/goccl/internal/elems"
	"github.com/goccl/goccl/reduceop"
)

// TestHosts runs one job across emulated hosts: hostsH network namespaces
// on one bridge (newNetns), each with hostsL rank processes in it, every
// rank in a UTS namespace of its own whose host name is its host's. Init
// then finds hostsL ranks a host by host identity (the host name is part
// of it), as on real machines: shared memory within a host, TCP across
// the bridge between hosts, and hostsL ranks a host in the cost model.
//
// Each rank reports the transport TransportFor names for every peer and
// the algorithm AlgorithmFor names for allreduce, allgather and
// reduce-scatter at hostsPickBytes; the parent holds the transports to
// the hosts it made and the algorithms to algo.SelectTopo on
// DefaultTopology(hostsL), and asserts that the model picks the two-level
// allreduce there. Each rank then runs every collective against the
// reference, on the model's choices and forced to the two-level family
// where it implements one (hostsRank).
//
// It is issue 37's CI short form of scripts/hosts-bench.sh. It needs root,
// iproute2's ip, util-linux's unshare and hostname, and skips without them.
func TestHosts(t *testing.T) {
	if os.Getenv(envHostsRank) != "" {
		hostsRank(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network and UTS namespaces")
	}
	for _, prog := range []string{"ip", "unshare", "hostname"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("needs %s (iproute2, util-linux, hostname): %v", prog, err)
		}
	}
	// What the parent expects the ranks to say, from the model alone.
	model := map[algo.Collective]algo.Algorithm{}
	for _, coll := range hostsColls {
		model[coll] = algo.SelectTopo(coll, hostsPickBytes, hostsH*hostsL, algo.DefaultTopology(hostsL))
	}
	if model[algo.AllReduce] != algo.TwoLevel {
		t.Errorf("the model picks %s, not %s, for a %d-byte allreduce on %d hosts of %d ranks",
			model[algo.AllReduce], algo.TwoLevel, hostsPickBytes, hostsH, hostsL)
	}

	start := time.Now()
	n := newNetns(t, hostsH)
	if out, err := exec.Command("ip", "netns", "exec", n.names[0], "unshare", "--uts", "hostname", "x").CombinedOutput(); err != nil {
		t.Skipf("unshare --uts does not work here: %v: %s", err, out)
	}
	outs, err := n.runHosts(t, 60*time.Second, os.Args[0], "-test.run=^TestHosts$", "-test.count=1")
	t.Logf("%d hosts of %d ranks: %v", hostsH, hostsL, time.Since(start).Round(time.Millisecond))
	if err != nil {
		for r, o := range outs {
			t.Logf("---- rank %d ----\n%s", r, o)
		}
		t.Fatal(err)
	}
	size := hostsH * hostsL
	for r, o := range outs {
		if !strings.Contains(o, fmt.Sprintf("HOSTS rank=%d ok", r)) {
			t.Errorf("rank %d did not finish:\n%s", r, o)
			continue
		}
		via := map[int]string{}
		for _, m := range hostsVia.FindAllStringSubmatch(o, -1) {
			if int(atoi(m[1])) == r {
				via[int(atoi(m[2]))] = m[3]
			}
		}
		for p := range size {
			want := "tcp"
			if p/hostsL == r/hostsL {
				want = "shm"
			}
			if p != r && via[p] != want {
				t.Errorf("rank %d (host %d) reaches rank %d (host %d) over %q, want %s", r, r/hostsL, p, p/hostsL, via[p], want)
			}
		}
		got := map[string]string{}
		for _, m := range hostsAlgo.FindAllStringSubmatch(o, -1) {
			if int(atoi(m[1])) == r && atoi(m[3]) == hostsPickBytes {
				got[m[2]] = m[4]
			}
		}
		for _, coll := range hostsColls {
			if got[coll.String()] != string(model[coll]) {
				t.Errorf("rank %d runs %s of %d bytes with %q, the model picks %s", r, coll, hostsPickBytes, got[coll.String()], model[coll])
			}
		}
		if r == 0 {
			t.Logf("rank 0: peers %v; at %d bytes %v", via, hostsPickBytes, got)
		}
	}
}

const (
	envHostsRank = "GOCCL_TEST_HOSTS_RANK" // set in a rank of TestHosts
	hostsH       = 2                       // emulated hosts
	hostsL       = 2                       // ranks a host
	// hostsPickBytes is where the ranks report their algorithms: 1 MiB a
	// rank, where the model's two-level allreduce moves half of what the
	// flat ring does between the hosts.
	hostsPickBytes = 1 << 20
)

// hostsColls are the collectives whose picks the ranks report.
var hostsColls = []algo.Collective{algo.AllReduce, algo.AllGather, algo.ReduceScatter}

// The ranks' report lines.
var (
	hostsVia  = regexp.MustCompile(`(?m)^HOSTS rank=(\d+) peer=(\d+) via=(\S*)$`)
	hostsAlgo = regexp.MustCompile(`(?m)^HOSTS rank=(\d+) coll=(\S+) bytes=(\d+) algo=(\S*)$`)
)

// runHosts starts hostsH·hostsL ranks of argv, rank r on host r/hostsL:
// in that host's network namespace, in a UTS namespace of its own named
// for the host, with torchrun's variables, and returns each rank's output
// and the first failure.
func (n *netns) runHosts(t *testing.T, timeout time.Duration, argv ...string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	size := hostsH * hostsL
	outs := make([]string, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		h := r / hostsL
		var env []string
		for _, kv := range cleanEnv(
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(size),
			"LOCAL_RANK="+strconv.Itoa(r%hostsL), "LOCAL_WORLD_SIZE="+strconv.Itoa(hostsL),
			"MASTER_ADDR="+n.addrs[0], "MASTER_PORT=29500",
			"GOCCL_IFNAME=eth0", envHostsRank+"=1") {
			if !strings.HasPrefix(kv, "GOCCL_TRANSPORT=") && !strings.HasPrefix(kv, "GOCCL_ALGO=") {
				env = append(env, kv)
			}
		}
		// sh's $0 is the host name, "$@" the rank's command.
		args := append([]string{"netns", "exec", n.names[h], "unshare", "--uts", "--",
			"sh", "-c", `hostname "$0" && exec "$@"`, fmt.Sprintf("goccl-host%d", h)}, argv...)
		cmd := exec.CommandContext(ctx, "ip", args...)
		cmd.Env = env
		cmd.WaitDelay = 10 * time.Second
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[r] = string(out)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d on host %d: %w", r, h, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return outs, err
		}
	}
	return outs, nil
}

// hostsRank is one rank of TestHosts: it reports its transports and
// picks, then runs every collective against the reference, first on the
// cost model's choices, then forced to the two-level family.
func hostsRank(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	c := rankComm(t, ctx)
	defer c.Close()
	n, me := c.Size(), c.Rank()
	for p := range n {
		if p != me {
			fmt.Printf("HOSTS rank=%d peer=%d via=%s\n", me, p, c.TransportFor(p))
		}
	}
	for _, coll := range hostsColls {
		fmt.Printf("HOSTS rank=%d coll=%s bytes=%d algo=%s\n", me, coll, hostsPickBytes, c.AlgorithmFor(coll, hostsPickBytes))
	}

	for _, a := range []algo.Algorithm{"", algo.TwoLevel} {
		must(t, c, "set_algorithm "+string(a), c.SetAlgorithm(a))
		runs := func(coll algo.Collective) bool { return a == "" || algo.Implements(a, coll) }
		if runs(algo.AllReduce) {
			for _, cnt := range []int{1, 13, 1031, hostsPickBytes / 4} {
				for _, cs := range []caseSpec{{reduceop.Float32, reduceop.Sum}, {reduceop.Int64, reduceop.Max}} {
					name := fmt.Sprintf("allreduce/%q/count=%d/%v/%v", a, cnt, cs.dt, cs.op)
					g := newGuarded(cs.dt, cnt)
					fill(g, cs.op, me, 0)
					must(t, c, name, c.AllReduce(ctx, g.buf(), cs.op))
					checkNamed(t, c, name, g, reference(cs.dt, cs.op, n, span(0, cnt)))
				}
			}
		}
		for _, root := range []int{0, n - 1} {
			for _, cnt := range []int{1, 1031, 70_001} {
				if runs(algo.Broadcast) {
					name := fmt.Sprintf("broadcast/%q/count=%d/root=%d", a, cnt, root)
					g := newGuarded(reduceop.Int32, cnt)
					fill(g, reduceop.Sum, me, 0)
					must(t, c, name, c.Broadcast(ctx, g.buf(), root))
					want := make([]float64, cnt)
					for i := range want {
						want[i] = val(reduceop.Sum, root, i)
					}
					checkNamed(t, c, name, g, want)
				}
				if runs(algo.Reduce) {
					name := fmt.Sprintf("reduce/%q/count=%d/root=%d", a, cnt, root)
					g := newGuarded(reduceop.Float64, cnt)
					fill(g, reduceop.Sum, me, 0)
					must(t, c, name, c.Reduce(ctx, g.buf(), reduceop.Sum, root))
					if me == root {
						checkNamed(t, c, name, g, reference(reduceop.Float64, reduceop.Sum, n, span(0, cnt)))
					}
				}
			}
			if runs(algo.Gather) {
				for _, m := range []int{1, 7, 200} {
					gatherScatter(t, ctx, c, fmt.Sprintf("%q/block=%d/root=%d", a, m, root), m, root)
				}
			}
		}
		for _, m := range []int{1, 257, 65_537} {
			if runs(algo.AllGather) {
				name := fmt.Sprintf("allgather/%q/block=%d", a, m)
				send := make([]int64, m)
				for i := range send {
					send[i] = int64(val(reduceop.Sum, me, i))
				}
				g := newGuarded(reduceop.Int64, n*m)
				must(t, c, name, c.AllGather(ctx, send, g.buf()))
				want := make([]float64, n*m)
				for i := range want {
					want[i] = val(reduceop.Sum, i/m, i%m)
				}
				checkNamed(t, c, name, g, want)
			}
			if runs(algo.ReduceScatter) {
				name := fmt.Sprintf("reducescatter/%q/block=%d", a, m)
				send := elems.Make(reduceop.Float32, n*m)
				for i := 0; i < n*m; i++ {
					elems.Set(send, i, val(reduceop.Sum, me, i))
				}
				g := newGuarded(reduceop.Float32, m)
				must(t, c, name, c.ReduceScatter(ctx, send, g.buf(), reduceop.Sum))
				checkNamed(t, c, name, g, reference(reduceop.Float32, reduceop.Sum, n, span(me*m, m)))
			}
			if runs(algo.AllToAll) {
				name := fmt.Sprintf("alltoall/%q/block=%d", a, m)
				send := make([]int64, n*m)
				for i := range send {
					send[i] = int64(me*1_000_000 + i)
				}
				g := newGuarded(reduceop.Int64, n*m)
				must(t, c, name, c.AllToAll(ctx, send, g.buf()))
				want := make([]float64, n*m)
				for i := range want {
					want[i] = float64((i/m)*1_000_000 + me*m + i%m)
				}
				checkNamed(t, c, name, g, want)
			}
		}
		if runs(algo.Barrier) {
			must(t, c, fmt.Sprintf("barrier/%q", a), c.Barrier(ctx))
		}
	}
	must(t, c, "set_algorithm cost model", c.SetAlgorithm(""))
	sendRecvRing(t, ctx, c)
	must(t, c, "final barrier", c.Barrier(ctx))
	fmt.Printf("HOSTS rank=%d ok\n", me)
}
