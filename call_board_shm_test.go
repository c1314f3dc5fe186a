package goccl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/reduceop"
)

// TestBoardShmProcesses: a job of 3 processes on this host under
// `goccl run` runs its 8-byte allreduces and barriers, on the world and
// on a group made by Split, on transport/shm's board: the results are
// right and Traffic counts no message for them. With GOCCL_BOARD=0 the
// same calls go over messages, which Traffic counts: so the first count
// says something.
func TestBoardShmProcesses(t *testing.T) {
	if os.Getenv(envBoardChild) != "" {
		boardChild(t)
		return
	}
	if testing.Short() {
		t.Skip("starts processes: skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("transport/shm is Linux only")
	}
	dir := buildBinaries(t, "./cmd/goccl")
	const n = 3
	for _, tc := range []struct {
		name  string
		board string
	}{{"board", ""}, {"off", "GOCCL_BOARD=0"}} {
		t.Run(tc.name, func(t *testing.T) {
			env := withoutVar(withoutVar(cleanEnv(envBoardChild+"=1"), "GOCCL_TRANSPORT"), "GOCCL_BOARD")
			if tc.board != "" {
				env = append(env, tc.board)
			}
			out, err := runJob(t, 2*time.Minute, env, filepath.Join(dir, "goccl"), "run", "-n", strconv.Itoa(n), "--",
				os.Args[0], "-test.run=^TestBoardShmProcesses$", "-test.count=1")
			if err != nil {
				t.Fatalf("job failed: %v\n%s", err, out)
			}
			lines := boardLine.FindAllStringSubmatch(out, -1)
			if len(lines) != n+2 { // the world's 3, the group {0, 2}'s 2
				t.Fatalf("%d BOARD lines, want %d:\n%s", len(lines), n+2, out)
			}
			for _, m := range lines {
				msgs, _ := strconv.Atoi(m[3])
				if on := tc.board == ""; on != (msgs == 0) {
					t.Errorf("rank %s, %s: %d messages for the small calls (board on: %v)", m[1], m[2], msgs, on)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

const envBoardChild = "GOCCL_TEST_BOARD_CHILD"

var boardLine = regexp.MustCompile(`(?m)^(?:\[\d+\] )?BOARD rank=(\d+) comm=(\w+) msgs=(\d+)$`)

// boardChild is one rank of TestBoardShmProcesses.
func boardChild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := goccl.Init(ctx, goccl.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := c.Split(ctx, c.Rank()%2, 0) // {0, 2} and {1}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, k := range []struct {
		name string
		c    *goccl.Comm
	}{{"world", c}, {"group", g}} {
		if k.c.Size() < 2 {
			continue
		}
		n := k.c.Size()
		msgs := func() int64 { s := c.Traffic().Total(); return s.SentMsgs + s.RecvMsgs }
		before := msgs()
		for i := range 200 {
			buf := []float64{float64(k.c.Rank() + i)}
			if err := k.c.AllReduce(ctx, buf, reduceop.Sum); err != nil {
				t.Fatal(err)
			}
			if want := float64(n*(n-1)/2 + n*i); buf[0] != want {
				t.Fatalf("%s rank %d, call %d: allreduce gave %v, want %v", k.name, k.c.Rank(), i, buf[0], want)
			}
			if i%10 == 0 {
				if err := k.c.Barrier(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		fmt.Printf("BOARD rank=%d comm=%s msgs=%d\n", c.Rank(), k.name, msgs()-before)
	}
}
