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

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/algo"
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

	n := newNetns(t, hostsH)
	if out, err := exec.Command("ip", "netns", "exec", n.names[0], "unshare", "--uts", "hostname", "x").CombinedOutput(); err != nil {
		t.Skipf("unshare --uts does not work here: %v: %s", err, out)
	}
	// Twice: as ranks with a core each, and as goccl run starts ranks
	// that outnumber the cores (waits yield the core, one P a rank), where
	// callers drain the shm rings beside the TCP links and the drainers
	// stand back (shm.Config.StandBack).
	for _, mode := range []struct {
		name string
		env  []string
	}{
		{"own-cores", nil},
		{"shared-cores", []string{goccl.EnvSpin + "=yield", "GOMAXPROCS=1"}},
	} {
		t.Run(mode.name, func(t *testing.T) { n.testHosts(t, model, mode.env) })
	}
}

// testHosts is one run of TestHosts' job, its ranks with env added.
func (n *netns) testHosts(t *testing.T, model map[algo.Collective]algo.Algorithm, env []string) {
	start := time.Now()
	outs, err := n.runHosts(t, 60*time.Second, env, os.Args[0], "-test.run=^TestHosts$", "-test.count=1")
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
// for the host, with torchrun's variables and extra, and returns each
// rank's output and the first failure.
func (n *netns) runHosts(t *testing.T, timeout time.Duration, extra []string, argv ...string) ([]string, error) {
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
		for _, kv := range cleanEnv(append([]string{
			"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(size),
			"LOCAL_RANK=" + strconv.Itoa(r%hostsL), "LOCAL_WORLD_SIZE=" + strconv.Itoa(hostsL),
			"MASTER_ADDR=" + n.addrs[0], "MASTER_PORT=29500",
			"GOCCL_IFNAME=eth0", envHostsRank + "=1"}, extra...)...) {
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

	sizes := suiteSizes{
		allReduce: []int{1, 13, 1031, hostsPickBytes / 4},
		allReduceCases: func(int) []caseSpec {
			return []caseSpec{{reduceop.Float32, reduceop.Sum}, {reduceop.Int64, reduceop.Max}}
		},
		roots:        []int{0, n - 1},
		rootCounts:   []int{1, 1031, 70_001},
		gatherBlocks: []int{1, 7, 200},
		blocks:       []int{1, 257, 65_537},
		scatterCases: []caseSpec{{reduceop.Float32, reduceop.Sum}},
		ref: func(dt reduceop.DType, op reduceop.Op, lo, cnt int) []float64 {
			return reference(dt, op, n, span(lo, cnt))
		},
	}
	for _, a := range []algo.Algorithm{"", algo.TwoLevel} {
		must(t, c, "set_algorithm "+string(a), c.SetAlgorithm(a))
		collectiveSuite(t, ctx, c, a, sizes)
	}
	must(t, c, "set_algorithm cost model", c.SetAlgorithm(""))
	sendRecvRing(t, ctx, c)
	must(t, c, "final barrier", c.Barrier(ctx))
	fmt.Printf("HOSTS rank=%d ok\n", me)
}
