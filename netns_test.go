package goccl_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// TestNetns runs the allreduce example as a multi-host job: each rank in
// its own network namespace with its own address, every namespace joined
// to a bridge that lives in one more namespace, as if each rank were a
// machine on one switch. Nothing outside the namespaces the test makes is
// touched, and they are deleted at the end. The ranks find each other
// through MASTER_ADDR (rank 0's address) and MASTER_PORT, as torchrun or a
// Kubernetes job would give them; 127.0.0.1 in one namespace is not
// another's, so every byte crosses the bridge.
//
// It needs root and iproute2's ip, and skips without them.
func TestNetns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("needs iproute2's ip (apt-get install iproute2): %v", err)
	}
	const maxRanks = 4
	n := newNetns(t, maxRanks)
	bin := filepath.Join(buildBinaries(t, "./examples/allreduce"), "allreduce")

	for _, size := range []int{maxRanks, 3} {
		t.Run(fmt.Sprintf("n=%d", size), func(t *testing.T) {
			out, err := n.runJob(t, size, nil, bin, "-timeout", "90s")
			checkRanks(t, out, err, size)
		})
	}
	// Without GOCCL_IFNAME the ranks must still advertise an address their
	// peers can reach: transport/tcp takes the first interface that is up
	// when the host name resolves to nothing local.
	t.Run("no-ifname", func(t *testing.T) {
		out, err := n.runJob(t, 2, []string{"GOCCL_IFNAME="}, bin, "-timeout", "20s")
		checkRanks(t, out, err, 2)
	})
}

// netns is a set of network namespaces, one per rank, on one bridge.
type netns struct {
	names []string // namespace of rank r
	addrs []string // address of rank r, on eth0 in its namespace
}

// newNetns makes k rank namespaces and the bridge, or skips t when the
// system does not allow it. Everything is removed when t ends.
func newNetns(t *testing.T, k int) *netns {
	t.Helper()
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	id := fmt.Sprintf("goccl-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	hub := id + "-hub"
	if err := ip("netns", "add", hub); err != nil {
		t.Skipf("cannot create network namespaces (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := ip("netns", "del", hub); err != nil {
			t.Error(err)
		}
	})
	must := func(args ...string) {
		t.Helper()
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	must("-n", hub, "link", "add", "br0", "type", "bridge")
	must("-n", hub, "link", "set", "br0", "up")
	subnet := fmt.Sprintf("10.231.%d", os.Getpid()%250)
	n := &netns{}
	for r := range k {
		ns := fmt.Sprintf("%s-r%d", id, r)
		must("netns", "add", ns)
		t.Cleanup(func() {
			if err := ip("netns", "del", ns); err != nil {
				t.Error(err)
			}
		})
		port := "p" + strconv.Itoa(r)
		must("-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		must("-n", hub, "link", "set", port, "master", "br0")
		must("-n", hub, "link", "set", port, "up")
		addr := fmt.Sprintf("%s.%d", subnet, r+1)
		must("-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		must("-n", ns, "link", "set", "eth0", "up")
		must("-n", ns, "link", "set", "lo", "up")
		n.names = append(n.names, ns)
		n.addrs = append(n.addrs, addr)
	}
	if out, err := exec.Command("ip", "netns", "exec", n.names[0], "true").CombinedOutput(); err != nil {
		t.Skipf("ip netns exec does not work here: %v: %s", err, out)
	}
	return n
}

// runJob starts ranks 0..size-1 of argv, rank r in namespace r with
// torchrun's variables and GOCCL_IFNAME=eth0 (then extraEnv), waits for all
// of them, and returns their outputs, each line prefixed with its rank, and
// the first failure.
func (n *netns) runJob(t *testing.T, size int, extraEnv []string, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs := make([]string, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		env := cleanEnv(
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(size),
			"LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
			"MASTER_ADDR="+n.addrs[0], "MASTER_PORT=29500",
			"GOCCL_IFNAME=eth0")
		env = append(env, extraEnv...)
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.names[r]}, argv...)...)
		cmd.Env = env
		cmd.WaitDelay = 10 * time.Second
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[r] = string(out)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d in %s: %w", r, n.names[r], err)
			}
		}()
	}
	wg.Wait()
	var b strings.Builder
	var first error
	for r := range size {
		for _, line := range strings.Split(strings.TrimRight(outs[r], "\n"), "\n") {
			fmt.Fprintf(&b, "[%d] %s\n", r, line)
		}
		if first == nil {
			first = errs[r]
		}
	}
	return b.String(), first
}

// TestNetnsLinkDown: four ranks, each in its own network namespace, loop
// over an allreduce; at its 50th call rank 2 sets its own end of the link
// to the bridge (eth0 in its namespace) down, as if its cable were pulled.
// Nothing tells the others: no FIN, no reset. Every survivor must return,
// within the timeout + 2 s, an error that names the allreduce and rank 2
// and wraps ErrTimeout, then fail fast with ErrAborted and leak nothing
// (victimChild in faults_frames_test.go). Rank 2 itself must only return
// in that time.
//
// It needs root and iproute2's ip, and skips without them.
func TestNetnsLinkDown(t *testing.T) {
	if os.Getenv(victimChildEnv) != "" {
		victimChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("needs iproute2's ip (apt-get install iproute2): %v", err)
	}
	const timeout = 5 * time.Second
	n := newNetns(t, victimRanks)
	out, err := n.runJob(t, victimRanks, []string{victimChildEnv + "=1", "GOCCL_TEST_VICTIM_SCENARIO=linkdown",
		"GOCCL_TEST_VICTIM_TIMEOUT=" + timeout.String(), "GOCCL_TRANSPORT=tcp"},
		os.Args[0], "-test.run=^TestNetnsLinkDown$", "-test.count=1")
	if err != nil {
		t.Errorf("job: %v", err)
	}
	// Split the job's output, each line prefixed with its rank, by rank.
	outs := make([]string, victimRanks)
	for _, line := range strings.Split(out, "\n") {
		for r := range outs {
			if rest, ok := strings.CutPrefix(line, fmt.Sprintf("[%d] ", r)); ok {
				outs[r] += rest + "\n"
			}
		}
	}
	for r, o := range outs {
		t.Logf("rank %d: %s", r, summary(o))
	}
	checkSurvivors(t, outs, goccl.ErrTimeout, timeout)
	switch f := parseFault(outs[victimRank]); {
	case f == nil:
		t.Errorf("rank %d (link down) reported no fault:\n%s", victimRank, outs[victimRank])
	case atoi(f["ms"]) > (timeout + 2*time.Second).Milliseconds():
		t.Errorf("rank %d (link down) took %s ms, more than the timeout %v + 2 s:\n%s", victimRank, f["ms"], timeout, outs[victimRank])
	}
}
