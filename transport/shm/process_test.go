//go:build linux

package shm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/shm"
)

// A child process plays rank 1 of a two-rank job when envChild is set:
// it echoes a message of 8 bytes from rank 0 (tag 1 back as tag 2) and
// one of 1 MiB (tag 5 back as tag 6), then closes
// ("clean") or waits to be killed ("hang").
const (
	envChild = "GOCCL_SHM_TEST_CHILD"
	envJob   = "GOCCL_SHM_TEST_JOB"
	envNonce = "GOCCL_SHM_TEST_NONCE"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

func child(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ep, err := shm.Connect(ctx, shm.Config{Rank: 1, Size: 2, JobID: os.Getenv(envJob), Nonce: os.Getenv(envNonce)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	buf := make([]byte, 8)
	if err := ep.Irecv(0, 1, buf).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child recv:", err)
		return 3
	}
	if err := ep.Isend(0, 2, buf).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child send:", err)
		return 4
	}
	big := make([]byte, 1<<20)
	if err := ep.Irecv(0, 5, big).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child recv:", err)
		return 5
	}
	if err := ep.Isend(0, 6, big).Wait(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child send:", err)
		return 6
	}
	if mode == "board" {
		if err := childBoard(ep); err != nil { // see TestProcessBoard
			fmt.Fprintln(os.Stderr, "child board:", err)
			return 7
		}
	}
	if mode == "hang" {
		select {} // until SIGKILL
	}
	ep.Close()
	return 0
}

// leftovers lists the files of job left in /dev/shm.
func leftovers(t *testing.T, job string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(shm.DefaultDir, "goccl-"+job+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// startChild starts rank 1 and connects rank 0 to it; it echoes a message
// and checks that no segment file is left once both sides mapped theirs.
func startChild(t *testing.T, mode string) (*shm.Endpoint, *exec.Cmd, chan *transport.PeerError, string) {
	t.Helper()
	if _, err := os.Stat(shm.DefaultDir); err != nil {
		t.Skipf("no %s: %v", shm.DefaultDir, err)
	}
	job := fmt.Sprintf("proc%d", os.Getpid())
	nonce := strings.ReplaceAll(fmt.Sprintf("%s%d", t.Name(), time.Now().UnixNano()), "/", "_")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envJob+"="+job, envNonce+"="+nonce,
		"GORACE=atexit_sleep_ms=0") // a -race child would otherwise take a second to exit
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ep, err := shm.Connect(ctx, shm.Config{Rank: 0, Size: 2, JobID: job, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	lost := make(chan *transport.PeerError, 1)
	ep.OnPeerLoss(func(pe *transport.PeerError) { lost <- pe })
	got := make([]byte, 8)
	r := ep.Irecv(1, 2, got)
	if err := ep.Isend(1, 1, []byte("ping1234")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil || string(got) != "ping1234" {
		t.Fatalf("echo: %q %v", got, err)
	}
	big, back := make([]byte, 1<<20), make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 13)
	}
	r = ep.Irecv(1, 6, back)
	if err := ep.Isend(1, 5, big).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Wait(ctx); err != nil || string(back) != string(big) {
		t.Fatalf("1 MiB echo: %v", err)
	}
	// Which path the 1 MiB messages took: "cma" unless the kernel refuses
	// process_vm_readv between these processes (then "copy").
	t.Logf("large messages to rank 1 go by %s; stats %+v", ep.LargePath(1), ep.Stats())
	if l := leftovers(t, job); len(l) > 0 {
		t.Errorf("segments left in %s while the job runs: %v", shm.DefaultDir, l)
	}
	return ep, cmd, lost, job
}

// TestProcessKill: rank 1, another process, is killed with SIGKILL while
// rank 0 waits on nothing from it; rank 0 reports the loss, fails a
// pending receive with ErrPeerClosed, and nothing is left in /dev/shm.
func TestProcessKill(t *testing.T) {
	ep, cmd, lost, job := startChild(t, "hang")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	select {
	case pe := <-lost:
		t.Fatalf("loss reported before the kill: %v", pe)
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case pe := <-lost:
		if pe.Peer != 1 || !errors.Is(pe, transport.ErrPeerClosed) {
			t.Fatalf("loss reported as %v", pe)
		}
	case <-ctx.Done():
		t.Fatal("the killed rank was not reported lost")
	}
	err := ep.Irecv(1, 3, make([]byte, 4)).Wait(ctx)
	var pe *transport.PeerError
	if !errors.Is(err, transport.ErrPeerClosed) || !errors.As(err, &pe) || pe.Peer != 1 {
		t.Fatalf("recv from the killed rank: %v", err)
	}
	if err := ep.Isend(1, 3, []byte("x")).Wait(ctx); !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("send to the killed rank: %v", err)
	}
	cmd.Wait()
	ep.Close()
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("segments left in %s after SIGKILL: %v", shm.DefaultDir, l)
	}
}

// TestProcessClean: rank 1 closes and exits; rank 0's pending receive
// fails with ErrPeerClosed but no loss is reported, and nothing is left.
func TestProcessClean(t *testing.T) {
	ep, cmd, lost, job := startChild(t, "clean")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := ep.Irecv(1, 3, make([]byte, 4)).Wait(ctx)
	if !errors.Is(err, transport.ErrPeerClosed) {
		t.Fatalf("recv from the rank that left: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	select {
	case pe := <-lost:
		t.Fatalf("a clean Close was reported as a loss: %v", pe)
	default:
	}
	ep.Close()
	if l := leftovers(t, job); len(l) > 0 {
		t.Fatalf("segments left in %s: %v", shm.DefaultDir, l)
	}
}
