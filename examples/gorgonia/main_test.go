package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccl/goccl"
)

// bin is where TestMain builds goccl's command and this example.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "goccl-gorgonia-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds goccl's command (from the repository root, goccl's own
// module) and this example once per test binary.
func build(t *testing.T) (gocclCmd, example string) {
	t.Helper()
	gocclCmd, example = filepath.Join(bin, "goccl"), filepath.Join(bin, "gorgonia")
	if _, err := os.Stat(example); err == nil {
		return gocclCmd, example
	}
	for _, b := range []struct{ dir, out, pkg string }{
		{"../..", gocclCmd, "./cmd/goccl"},
		{".", example, "."},
	} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s in %s: %v\n%s", b.pkg, b.dir, err, out)
		}
	}
	return gocclCmd, example
}

// cleanEnv is this process's environment without any launcher's or
// goccl's variables, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "GOCCL_"), strings.HasPrefix(name, "OMPI_"), strings.HasPrefix(name, "PMI"),
			strings.HasPrefix(name, "SLURM_"), strings.HasPrefix(name, "MASTER_"),
			name == "RANK", name == "WORLD_SIZE", name == "LOCAL_RANK", name == "LOCAL_WORLD_SIZE":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// runJob runs a command for at most two minutes and returns its combined
// output and error.
func runJob(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var rankOK = regexp.MustCompile(`(?m)^(?:\[\d+\] )?rank (\d+)/(\d+) ok checksum=([0-9a-f]{16}) max_rel_diff_one_process=(\S+)$`)

// checkOK checks that each of n ranks said ok, with one checksum, and
// returns the difference from the one-process run that they report.
func checkOK(t *testing.T, out string, n int) float64 {
	t.Helper()
	ms := rankOK.FindAllStringSubmatch(out, -1)
	seen := map[string]bool{}
	for _, m := range ms {
		if m[2] != strconv.Itoa(n) {
			t.Errorf("a rank of a world of %s, want %d: %s", m[2], n, m[0])
		}
		if m[3] != ms[0][3] || m[4] != ms[0][4] {
			t.Errorf("ranks report different results:\n%s\n%s", ms[0][0], m[0])
		}
		seen[m[1]] = true
	}
	if len(seen) != n || len(ms) != n {
		t.Fatalf("%d ranks said ok (%d lines), want %d:\n%s", len(seen), len(ms), n, out)
	}
	d, err := strconv.ParseFloat(ms[0][4], 64)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDataParallel runs the example under goccl run with 2 and 4 ranks:
// each must end with the others' weights and within -tol of the
// one-process run.
func TestDataParallel(t *testing.T) {
	gocclCmd, example := build(t)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			out, err := runJob(t, cleanEnv(), gocclCmd, "run", "-n", strconv.Itoa(n), "--", example, "-timeout", "90s")
			if err != nil {
				t.Fatalf("goccl run -n %d: %v\n%s", n, err, out)
			}
			d := checkOK(t, out, n)
			t.Logf("%d ranks: max relative difference from one process: %g", n, d)
			if !strings.Contains(out, "[0] epoch 19 loss") {
				t.Errorf("rank 0 printed no last epoch:\n%s", out)
			}
		})
	}
}

// TestTolerance: with -tol 0 the run passes only if it matches the
// one-process run bit for bit, and otherwise fails on every rank with a
// non-zero status.
func TestTolerance(t *testing.T) {
	gocclCmd, example := build(t)
	out, err := runJob(t, cleanEnv(), gocclCmd, "run", "-n", "4", "--", example, "-timeout", "90s", "-tol", "0")
	if err == nil {
		if d := checkOK(t, out, 4); d != 0 {
			t.Fatalf("-tol 0 passed with a difference of %g:\n%s", d, out)
		}
		return
	}
	if !strings.Contains(out, "differ from the one-process run by") {
		t.Fatalf("-tol 0 failed for another reason: %v\n%s", err, out)
	}
}

// TestOneRank runs the program alone with GOCCL_TRANSPORT=mem: a one-rank
// job that is its own one-process run, so the difference is zero.
func TestOneRank(t *testing.T) {
	_, example := build(t)
	out, err := runJob(t, cleanEnv("GOCCL_TRANSPORT=mem"), example, "-tol", "0")
	if err != nil {
		t.Fatalf("GOCCL_TRANSPORT=mem: %v\n%s", err, out)
	}
	if d := checkOK(t, out, 1); d != 0 {
		t.Errorf("a one-rank job differs from the one-process run by %g", d)
	}
}

// TestNoLauncher: started by hand without a launcher, the program fails
// and the message says how to start it.
func TestNoLauncher(t *testing.T) {
	_, example := build(t)
	out, err := runJob(t, cleanEnv(), example)
	if err == nil {
		t.Fatalf("ran without a launcher:\n%s", out)
	}
	for _, want := range []string{"goccl run -n N", "GOCCL_TRANSPORT=mem"} {
		if !strings.Contains(out, want) {
			t.Errorf("the error does not say %q:\n%s", want, out)
		}
	}
}

// TestInProcess trains over goccl.RunLocal, ranks as goroutines, and
// compares with the one-process run directly.
func TestInProcess(t *testing.T) {
	cfg := config{batch: 32, epochs: 5, lr: 0.05, quiet: true}
	data := makeDataset(1)
	want, err := trainAlone(t.Context(), data, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4} {
		got := make([]result, n)
		err := goccl.RunLocal(t.Context(), n, func(ctx context.Context, c *goccl.Comm) error {
			var err error
			got[c.Rank()], err = train(ctx, c, data, cfg)
			return err
		})
		if err != nil {
			t.Fatalf("%d ranks: %v", n, err)
		}
		for r := range got {
			if checksum(got[r].weights) != checksum(got[0].weights) {
				t.Errorf("%d ranks: rank %d's weights differ from rank 0's", n, r)
			}
		}
		if d := maxRelDiff(got[0].weights, want.weights); !(d <= 1e-12) {
			t.Errorf("%d ranks: %g from the one-process run", n, d)
		}
		if !(got[0].lastLoss < got[0].firstLoss) {
			t.Errorf("%d ranks: loss went from %g to %g", n, got[0].firstLoss, got[0].lastLoss)
		}
	}
}

// TestTrainRefusesUnevenShards: a batch the ranks cannot split evenly is
// refused before anything is sent.
func TestTrainRefusesUnevenShards(t *testing.T) {
	err := goccl.RunLocal(t.Context(), 3, func(ctx context.Context, c *goccl.Comm) error {
		_, err := train(ctx, c, makeDataset(1), config{batch: 32, epochs: 1, lr: 0.05, quiet: true})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "-batch 32") {
		t.Fatalf("3 ranks, batch 32: %v", err)
	}
}
