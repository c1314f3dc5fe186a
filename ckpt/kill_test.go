package ckpt_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl"
	"github.com/goccl/goccl/ckpt"
)

// The environment of TestKillRestore's child processes.
const (
	killRoleEnv = "GOCCL_TEST_CKPT_ROLE" // survivor, victim or replacement
	killDirEnv  = "GOCCL_TEST_CKPT_DIR"  // where ranks leave what they saved and their final state
	killPadEnv  = "GOCCL_TEST_CKPT_PAD"  // bytes of padding in each rank's state (default killPad)
)

const (
	killN     = 6
	killSteps = 15
	killEvery = 3       // a Save after every third step
	killAt    = 11      // the victims die as step 11 starts: the last Save was after step 9
	killPad   = 1 << 20 // a stand-in for larger state (optimizer moments), rewritten every step
)

var killVictims = []int{2, 5}

// TestKillRestore trains on 6 processes over TCP (goccl.Init) with the
// weights, the 1-bit error-feedback buffers and a padding blob as each
// rank's state, saved with k=3, m=2 every 3 steps. After step 10, ranks 2
// and 5 kill themselves with SIGKILL (one that sees the other's death
// first dies then, maybe while the survivors Shrink, which must leave it
// out: scripts/killrestore.sh runs this 50 times). The 4 survivors see the failure,
// Shrink and train 2 steps on 4 ranks (with 1-bit buffers for 4), then
// Readmit with 2 replacement processes started with GOCCL_REJOIN=1. Every
// rank Restores the step-9 checkpoint and checks it byte for byte against
// what it saved (a replacement against the file its victim wrote after
// each Save), resumes to step 15 and leaves its state in a file, which
// must equal, bit for bit, that of the same training run in-process
// without failure.
func TestKillRestore(t *testing.T) {
	if role := os.Getenv(killRoleEnv); role != "" {
		killChild(t, role)
		return
	}
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}

	// The run without failure.
	ref := make([][]byte, killN)
	err := run(t, killN, func(ctx context.Context, c *goccl.Comm) error {
		wk, err := newWorker(c.Rank(), killN)
		if err != nil {
			return err
		}
		for wk.step < killSteps {
			if err := wk.train(ctx, c); err != nil {
				return err
			}
		}
		ref[c.Rank()] = wk.marshal()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	port := killFreePort(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel() // kills any child left, before wg.Wait
	outs := make([]strings.Builder, 2*killN)
	cmds := make([]*exec.Cmd, 2*killN)
	start := func(i, rank int, role string) chan struct{} {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKillRestore$", "-test.count=1")
		cmd.Env = append(killChildEnv(), killRoleEnv+"="+role, killDirEnv+"="+dir,
			"RANK="+strconv.Itoa(rank), "WORLD_SIZE="+strconv.Itoa(killN),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		if role == "replacement" {
			cmd.Env = append(cmd.Env, "GOCCL_REJOIN=1")
		}
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
		done := make(chan struct{})
		wg.Go(func() {
			cmd.Wait()
			close(done)
		})
		return done
	}
	var dead []chan struct{}
	for r := range killN {
		if slices.Contains(killVictims, r) {
			dead = append(dead, start(r, r, "victim"))
		} else {
			start(r, r, "survivor")
		}
	}
	// Replacements start once the victims are dead, as a launcher
	// restarting failed workers would.
	for _, done := range dead {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the victims did not die")
		}
	}
	for _, r := range killVictims {
		start(killN+r, r, "replacement")
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Error("the job did not end within 50 s")
	}
	for _, r := range killVictims {
		ws, _ := cmds[r].ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("victim rank %d ended with %v, not SIGKILL:\n%s", r, cmds[r].ProcessState, outs[r].String())
		}
	}
	for r := range killN {
		i := r
		if slices.Contains(killVictims, r) {
			i = killN + r
		}
		out := outs[i].String()
		if !strings.Contains(out, "CKPT OK") {
			t.Errorf("rank %d:\n%s", r, out)
			continue
		}
		for line := range strings.Lines(out) {
			if strings.HasPrefix(line, "CKPT OK") {
				t.Log(strings.TrimSpace(line))
			}
		}
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("final-%d", r)))
		if err != nil {
			t.Error(err)
		} else if !bytes.Equal(got, ref[r]) {
			t.Errorf("rank %d: state after resuming differs from the run without failure", r)
		}
	}
}

// killChild is one rank of TestKillRestore.
func killChild(t *testing.T, role string) {
	ctx := context.Background()
	dir := os.Getenv(killDirEnv)
	pad := killPad
	if v := os.Getenv(killPadEnv); v != "" {
		var err error
		if pad, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s=%q: %v", killPadEnv, v, err)
		}
	}
	c, err := goccl.Init(ctx, goccl.WithTimeout(20*time.Second), goccl.WithShrinkWait(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rank, n := c.Rank(), c.Size()
	cfg := ckpt.Config{DataShards: 3, ParityShards: 2}
	wk, err := newWorker(rank, n)
	if err != nil {
		t.Fatal(err)
	}
	var (
		s         *ckpt.Store
		saved     []byte // the state of the last Save
		saving    time.Duration
		saves     int
		shrinking time.Duration
	)
	save := func() error {
		saved = killState(wk, rank, pad)
		t0 := time.Now()
		if err := s.Save(ctx, saved); err != nil {
			return err
		}
		saving += time.Since(t0)
		saves++
		return nil
	}

	if role == "replacement" {
		// Fresh memory; what the victim saved is only in its file.
		if saved, err = os.ReadFile(filepath.Join(dir, fmt.Sprintf("saved-%d", rank))); err != nil {
			t.Fatal(err)
		}
		if s, err = ckpt.New(c, cfg); err != nil {
			t.Fatal(err)
		}
	} else {
		if s, err = ckpt.New(c, cfg); err != nil {
			t.Fatal(err)
		}
		var err error
		for wk.step < killSteps && err == nil {
			if role == "victim" && wk.step == killAt-1 {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
			if err = wk.train(ctx, c); err == nil && wk.step%killEvery == 0 {
				if err = save(); err == nil && role == "victim" {
					err = writeFileAtomic(filepath.Join(dir, fmt.Sprintf("saved-%d", rank)), saved)
				}
			}
		}
		if !errors.Is(err, goccl.ErrPeerClosed) {
			t.Fatalf("rank %d at step %d: %v, want ErrPeerClosed", rank, wk.step, err)
		}
		if role == "victim" {
			// The other victim died first and this one saw it before its
			// own turn: it dies now, as a cascading failure does, perhaps
			// while the survivors Shrink.
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}

		// Go on without the lost ranks for a while.
		t0 := time.Now()
		sh, err := c.Shrink(ctx)
		shrinking = time.Since(t0)
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if sh.Size() != n-len(killVictims) || sh.JobRank() != rank {
			t.Fatalf("rank %d: shrunk to size %d, job rank %d", rank, sh.Size(), sh.JobRank())
		}
		if err := s.Rebind(sh); !errors.Is(err, ckpt.ErrConfig) {
			t.Fatalf("rank %d: Rebind to the shrunk communicator: %v, want ErrConfig", rank, err)
		}
		if err := trainShrunk(ctx, sh, saved, rank, pad); err != nil {
			t.Fatalf("rank %d: training on %d ranks: %v", rank, sh.Size(), err)
		}

		// Take in the replacements and move the shards to the new world.
		w, err := sh.Readmit(ctx)
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		sh.Close()
		c.Close()
		c = w
		if c.Size() != n || c.Rank() != rank {
			t.Fatalf("rank %d: readmitted as rank %d of %d", rank, c.Rank(), c.Size())
		}
		if err := s.Rebind(c); err != nil {
			t.Fatal(err)
		}
	}

	t0 := time.Now()
	state, err := s.Restore(ctx)
	restoring := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(state, saved) {
		t.Fatalf("rank %d: restored %d bytes differ from the %d saved", rank, len(state), len(saved))
	}
	if g, want := s.Generation(), uint64((killAt-1)/killEvery); g != want {
		t.Fatalf("rank %d: generation %d after Restore, want %d", rank, g, want)
	}
	if err := fromKillState(wk, state, rank, pad); err != nil {
		t.Fatalf("rank %d: %v", rank, err)
	}
	for wk.step < killSteps {
		if err := wk.train(ctx, c); err != nil {
			t.Fatalf("rank %d: step %d after Restore: %v", rank, wk.step, err)
		}
		if wk.step%killEvery == 0 {
			if err := save(); err != nil {
				t.Fatalf("rank %d: %v", rank, err)
			}
		}
	}
	// Each rank holds one shard of ceil(L/k) bytes of each other rank's
	// state of L bytes: about (k+m)/k = 1.67 times its own.
	want := 0
	for o := range n {
		if o != rank {
			other, err := newWorker(o, n)
			if err != nil {
				t.Fatal(err)
			}
			want += (len(killState(other, o, pad)) + cfg.DataShards - 1) / cfg.DataShards
		}
	}
	if held := s.HeldBytes(); held != want {
		t.Fatalf("rank %d: holds %d bytes of shards, want %d", rank, held, want)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("final-%d", rank)), wk.marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	// Close in step: rank 0 hosts the store.
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	shrunk := ""
	if role != "replacement" {
		shrunk = fmt.Sprintf(", shrink %.1f ms", ms(shrinking))
	}
	fmt.Printf("CKPT OK rank %d %s: state %d B, shards held %.3f x state, %d saves, %.1f ms/save%s, restore %.1f ms (with the re-save)\n",
		rank, role, len(saved), float64(want)/float64(len(saved)), saves, ms(saving)/float64(max(saves, 1)), shrunk, ms(restoring))
}

// trainShrunk trains 2 steps on the shrunk communicator from the weights
// of the last checkpoint, with 1-bit error buffers for its size, and
// checks that the weights moved and are the same on every rank.
func trainShrunk(ctx context.Context, sh *goccl.Comm, saved []byte, rank, pad int) error {
	ckp, err := newWorker(rank, killN)
	if err != nil {
		return err
	}
	if err := fromKillState(ckp, saved, rank, pad); err != nil {
		return err
	}
	wk, err := newWorker(sh.Rank(), sh.Size())
	if err != nil {
		return err
	}
	copy(wk.w, ckp.w)
	wk.step = ckp.step
	for range 2 {
		if err := wk.train(ctx, sh); err != nil {
			return err
		}
	}
	if slices.Equal(wk.w, ckp.w) {
		return errors.New("the weights did not change")
	}
	h := sha256.New()
	binary.Write(h, binary.LittleEndian, wk.w)
	mine := h.Sum(nil)
	all := make([]byte, len(mine)*sh.Size())
	if err := sh.AllGather(ctx, mine, all); err != nil {
		return err
	}
	for r := range sh.Size() {
		if !bytes.Equal(all[r*len(mine):(r+1)*len(mine)], mine) {
			return fmt.Errorf("rank %d of the shrunk communicator has other weights", r)
		}
	}
	return nil
}

// killState is a worker's checkpoint: the length of its marshalled form,
// that form, and pad bytes that depend on the rank and step.
func killState(wk *worker, rank, pad int) []byte {
	m := wk.marshal()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(m)))
	b = append(b, m...)
	return append(b, padding(rank, wk.step, pad)...)
}

// fromKillState loads a checkpoint that killState made into wk.
func fromKillState(wk *worker, state []byte, rank, pad int) error {
	if len(state) < 8 {
		return fmt.Errorf("state of %d bytes", len(state))
	}
	l := binary.LittleEndian.Uint64(state)
	if l > uint64(len(state)-8) {
		return fmt.Errorf("state of %d bytes holds a worker of %d", len(state), l)
	}
	if err := wk.unmarshal(state[8 : 8+l]); err != nil {
		return err
	}
	if !bytes.Equal(state[8+l:], padding(rank, wk.step, pad)) {
		return fmt.Errorf("padding is not that of step %d", wk.step)
	}
	return nil
}

func padding(rank int, step uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + rank*17 + int(step)*29 + i>>11)
	}
	return b
}

// writeFileAtomic writes name whole or not at all.
func writeFileAtomic(name string, b []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func killFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// killChildEnv is the parent's environment without what would make a
// child find another launcher or transport, or rejoin.
func killChildEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OMPI_COMM_WORLD_") || strings.HasPrefix(kv, "GOCCL_TRANSPORT=") || strings.HasPrefix(kv, "GOCCL_REJOIN=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
