package goccl_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
	"github.com/goccl/goccl/store"
)

const elasticChildEnv = "GOCCL_TEST_ELASTIC_CHILD"

// TestShrinkReadmit runs 5 ranks as processes over TCP. Two ranks kill
// themselves with SIGKILL in the middle of a loop of allreduces. The three
// survivors Shrink to a communicator of 3 and check an allreduce there;
// then two replacement processes start as the lost ranks with
// GOCCL_REJOIN=1, the survivors Readmit, and all 5 check an allreduce in
// the new world, every survivor with its old rank. Rank 0 hosts the store,
// so it survives; with a store of the job's own (GOCCL_EXTERNAL_STORE=1)
// rank 0 may die too.
func TestShrinkReadmit(t *testing.T) {
	if os.Getenv(elasticChildEnv) != "" {
		elasticChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	t.Run("rank0-hosts", func(t *testing.T) { shrinkReadmit(t, []int{1, 3}, false) })
	t.Run("external-store", func(t *testing.T) { shrinkReadmit(t, []int{0, 3}, true) })
}

func shrinkReadmit(t *testing.T, lost []int, external bool) {
	const n = 5
	victims := map[int]bool{}
	var names []string
	for _, r := range lost {
		victims[r] = true
		names = append(names, strconv.Itoa(r))
	}
	port := freePort(t)
	var extra []string
	if external {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatal(err)
		}
		srv := store.NewServer(store.Options{})
		go srv.Serve(context.Background(), ln)
		defer srv.Close()
		extra = append(extra, "GOCCL_EXTERNAL_STORE=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := func(rank int, role string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestShrinkReadmit$", "-test.count=1")
		cmd.Env = append(childEnv(), elasticChildEnv+"="+role, "RANK="+strconv.Itoa(rank),
			"WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"GOCCL_TEST_VICTIMS="+strings.Join(names, ","))
		cmd.Env = append(cmd.Env, extra...)
		if role == "replacement" {
			cmd.Env = append(cmd.Env, "GOCCL_REJOIN=1")
		}
		return cmd
	}
	outs := make([]strings.Builder, 2*n)
	var wg sync.WaitGroup
	run := func(i int, cmd *exec.Cmd) chan struct{} {
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		wg.Go(func() {
			cmd.Wait()
			close(done)
		})
		return done
	}
	var dead []chan struct{}
	for r := range n {
		role := "survivor"
		if victims[r] {
			role = "victim"
		}
		done := run(r, start(r, role))
		if victims[r] {
			dead = append(dead, done)
		}
	}
	// Start the replacements once the victims are dead, as a launcher
	// restarting failed workers would.
	for _, done := range dead {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the victims did not die")
		}
	}
	for r := range n {
		if victims[r] {
			run(n+r, start(r, "replacement"))
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the job did not end within 90 s")
	}
	for r := range n {
		out := outs[r].String()
		if victims[r] {
			out = outs[n+r].String()
		}
		if !strings.Contains(out, "ELASTIC OK") {
			t.Errorf("rank %d:\n%s", r, out)
		}
	}
}

func elasticChild(t *testing.T) {
	role := os.Getenv(elasticChildEnv)
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithTimeout(20*time.Second), goccl.WithShrinkWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := c.Size()
	sum := func(c *goccl.Comm) (float64, error) {
		v := []float64{float64(c.JobRank() + 1)}
		err := c.AllReduce(ctx, v, reduceop.Sum)
		return v[0], err
	}
	if role == "survivor" || role == "victim" {
		// Loop until the victims die; each survivor sees a failure.
		var err error
		for i := 0; err == nil; i++ {
			if role == "victim" && i == 30 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			_, err = sum(c)
		}
		if !errors.Is(err, goccl.ErrPeerClosed) {
			t.Fatalf("rank %d: %v, want ErrPeerClosed", c.Rank(), err)
		}
		if role == "victim" {
			// The other victim died first and this one saw it: it dies
			// now rather than shrink with the survivors (and leave them
			// a member that exits after Shrink).
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		s, err := c.Shrink(ctx)
		if err != nil {
			t.Fatalf("rank %d: shrink: %v", c.Rank(), err)
		}
		// The survivors' job ranks, plus one each.
		want, alive := 0.0, 0
		for r := range n {
			if !strings.Contains(","+os.Getenv("GOCCL_TEST_VICTIMS")+",", ","+strconv.Itoa(r)+",") {
				want += float64(r + 1)
				alive++
			}
		}
		if s.Size() != alive || s.JobRank() != c.Rank() {
			t.Fatalf("shrunk: size %d, job rank %d, want %d and %d", s.Size(), s.JobRank(), alive, c.Rank())
		}
		if got, err := sum(s); err != nil || got != want {
			t.Fatalf("rank %d: allreduce after shrink: %v %v, want %v", c.Rank(), got, err, want)
		}
		w, err := s.Readmit(ctx)
		if err != nil {
			t.Fatalf("rank %d: readmit: %v", c.Rank(), err)
		}
		s.Close()
		c.Close()
		c = w
	}
	if c.Size() != n || c.Rank() != c.JobRank() {
		t.Fatalf("new world: size %d, rank %d, job rank %d", c.Size(), c.Rank(), c.JobRank())
	}
	want := float64(n * (n + 1) / 2)
	for range 20 {
		if got, err := sum(c); err != nil || got != want {
			t.Fatalf("rank %d: allreduce after readmit: %v %v, want %v", c.Rank(), got, err, want)
		}
	}
	// Close in step: rank 0 hosts the store.
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	fmt.Printf("ELASTIC OK rank %d role %s\n", c.Rank(), role)
}

// TestShrinkSecondFailure: 4 ranks as processes over TCP; rank 3 kills
// itself in a loop of allreduces, and rank 1, a survivor of that, is
// killed in the middle of Shrink: once it has registered, once the members
// are agreed (it among them), once it has connected to the others. Ranks 0
// and 2 must end with a communicator of the two of them whose allreduce
// works.
func TestShrinkSecondFailure(t *testing.T) {
	if os.Getenv(elasticChildEnv) != "" {
		secondFailureChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	const n = 4
	for _, stage := range []string{"registered", "agreed", "connected"} {
		t.Run(stage, func(t *testing.T) {
			port := freePort(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			outs := make([]strings.Builder, n)
			cmds := make([]*exec.Cmd, n)
			for r := range n {
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestShrinkSecondFailure$", "-test.count=1")
				cmd.Env = append(childEnv(), elasticChildEnv+"="+stage, "RANK="+strconv.Itoa(r),
					"WORLD_SIZE="+strconv.Itoa(n), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
				cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
			}
			for _, cmd := range cmds {
				cmd.Wait()
			}
			if ctx.Err() != nil {
				t.Fatal("the job did not end within 60 s")
			}
			for r, cmd := range cmds {
				ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
				switch {
				case r == 1 || r == 3:
					if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
						t.Errorf("rank %d ended with %v, not SIGKILL:\n%s", r, cmd.ProcessState, outs[r].String())
					}
				case !strings.Contains(outs[r].String(), "SHRINK OK"):
					t.Errorf("rank %d:\n%s", r, outs[r].String())
				}
			}
		})
	}
}

// secondFailureChild is one rank of TestShrinkSecondFailure.
func secondFailureChild(t *testing.T) {
	stage := os.Getenv(elasticChildEnv)
	ctx := context.Background()
	c, err := goccl.Init(ctx, goccl.WithTimeout(20*time.Second), goccl.WithShrinkWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	me := c.Rank()
	if me == 1 {
		goccl.SetTestShrinkHook(func(s string) {
			if s == stage {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		})
	}
	for i := 0; ; i++ {
		if me == 3 && i == 30 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if err = c.AllReduce(ctx, []float64{1}, reduceop.Sum); err != nil {
			break
		}
	}
	if !errors.Is(err, goccl.ErrPeerClosed) {
		t.Fatalf("rank %d: %v, want ErrPeerClosed", me, err)
	}
	s, err := c.Shrink(ctx)
	if err != nil {
		t.Fatalf("rank %d: shrink: %v", me, err)
	}
	if me == 1 {
		t.Fatalf("rank 1 was not killed in Shrink (stage %s)", stage)
	}
	if s.Size() != 2 || s.JobRank() != me {
		t.Fatalf("rank %d: shrunk to size %d, job rank %d; want 2, %d", me, s.Size(), s.JobRank(), me)
	}
	v := []float64{float64(me + 1)}
	if err := s.AllReduce(ctx, v, reduceop.Sum); err != nil || v[0] != 4 {
		t.Fatalf("rank %d: allreduce after shrink: %v %v, want 4", me, v[0], err)
	}
	// Close in step: rank 0 hosts the store.
	if err := s.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	c.Close()
	fmt.Printf("SHRINK OK rank %d\n", me)
}
