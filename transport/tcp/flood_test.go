//go:build linux

package tcp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/testutil"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/tcp"
)

// The flood test's attacker runs in a child process, this test binary
// again (testutil.StartFlood); the environment tells it what to attack.
const (
	envFloodAddr  = "GOCCL_TEST_TCP_FLOOD_ADDR"  // in the child: the listener to attack
	envFloodN     = "GOCCL_TEST_TCP_FLOOD_N"     // silent connections to open
	envFloodBound = "GOCCL_TEST_TCP_FLOOD_BOUND" // each must be closed within this of its dial
)

// TestStrangerFlood: 2000 connections that never send a byte, and some
// that send garbage, against a rank's listener while its job connects.
// The job connects and exchanges messages; every attacking connection is
// closed within the handshake timeout plus 5 s of its dial; the process
// running the ranks never holds more descriptors than MaxPending plus its
// own; and the log holds a summary, not a line per connection.
func TestStrangerFlood(t *testing.T) {
	if addr := os.Getenv(envFloodAddr); addr != "" {
		floodChild(t, addr)
		return
	}
	const (
		deadline   = 300 * time.Millisecond
		maxPending = 64
		silent     = 2000
		size       = 3
	)
	testutil.RaiseFileLimit(t, 256)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var logs testutil.Buffer
	base := tcp.Config{Size: size, JobID: fmt.Sprintf("flood-%d", jobSeq.Add(1)), KV: testutil.NewKV(),
		ListenHost: "127.0.0.1", Secret: []byte("flood"), HandshakeTimeout: deadline, MaxPending: maxPending,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}

	fds := testutil.OpenFDs(t)
	// Count the descriptors until the attack and the job are over.
	stopSampling := testutil.SampleFDs()

	// Rank 2 accepts from ranks 0 and 1: it is the one attacked.
	eps := make([]transport.Endpoint, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	start := func(r int) {
		wg.Go(func() {
			cfg := base
			cfg.Rank = r
			eps[r], errs[r] = tcp.Connect(ctx, cfg)
		})
	}
	start(2)
	addr, err := base.KV.Get(ctx, tcp.AddrKey(2))
	if err != nil {
		t.Fatal(err)
	}
	child := testutil.StartFlood(t, "^TestStrangerFlood$", envFloodAddr+"="+string(addr), envFloodN+"="+strconv.Itoa(silent),
		envFloodBound+"="+(deadline+5*time.Second).String())
	start(0)
	start(1)
	wg.Wait()
	defer func() {
		for _, ep := range eps {
			if ep != nil {
				ep.Close()
			}
		}
	}()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// Every pair exchanges a message.
	for src := range size {
		for dst := range size {
			if src == dst {
				continue
			}
			got := make([]byte, 2)
			rq := eps[dst].Irecv(src, 7, got)
			if err := eps[src].Isend(dst, 7, []byte{byte(src), byte(dst)}).Wait(ctx); err != nil {
				t.Fatalf("send %d->%d: %v", src, dst, err)
			}
			if err := rq.Wait(ctx); err != nil || got[0] != byte(src) || got[1] != byte(dst) {
				t.Fatalf("recv %d->%d: %v %v", src, dst, got, err)
			}
		}
	}
	report := child.Wait(t)
	most := stopSampling()

	// Allowed: the descriptors before the ranks existed, MaxPending
	// connections in their handshake, the ranks' own (three listeners
	// while they connect, two ends of each of three links) and slack for
	// the pipes to the child, the runtime's poller, the sampler's own
	// directory handle, a real peer's connection in its handshake and one
	// accepted beyond the cap in the instant before it is closed.
	limit := fds + maxPending + 3 + 2*3 + 16
	t.Logf("descriptors: %d before, at most %d during the attack (limit %d); %s", fds, most, limit, report)
	if most > limit {
		t.Errorf("the process held %d descriptors, more than %d before + %d in handshake + its own", most, fds, maxPending)
	}
	if warns := strings.Count(logs.String(), "level=WARN"); warns > 3 {
		t.Errorf("%d warn lines for one flood; want a summary at most every 10 s:\n%s", warns, logs.String())
	}
	if !strings.Contains(logs.String(), "refused") {
		t.Errorf("no refusal logged:\n%s", logs.String())
	}
}

// floodChild is the attacker: it opens the garbage connections, then the
// silent ones, says so, and checks that the listener closes each within
// the bound.
func floodChild(t *testing.T, addr string) {
	n, bound := testutil.FloodArgs(t, envFloodN, envFloodBound)
	fixed := func(version uint16, jobLen uint16) []byte {
		b := []byte("GCCL")
		b = binary.LittleEndian.AppendUint16(b, version)
		b = binary.LittleEndian.AppendUint16(b, 1)
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = binary.LittleEndian.AppendUint32(b, 3)
		b = binary.LittleEndian.AppendUint16(b, 0)
		return binary.LittleEndian.AppendUint16(b, jobLen)
	}
	garbage := map[string][]byte{
		"http":        []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"random":      bytes.Repeat([]byte{0x5a, 0xc3, 0x11, 0x99}, 16),
		"tls":         {0x16, 0x03, 0x01, 0x00, 0x05, 1, 0, 0, 1, 0},
		"bad version": fixed(9, 0),
		"long job id": fixed(1, 60000),
		"half hello":  fixed(1, 10)[:7],
		"no nonce":    append(fixed(1, 3), "job"...),
	}
	results := testutil.Attack(t, addr, garbage, n, bound)
	open := map[string]int{}
	answered := 0
	for _, r := range results {
		if errors.Is(r.Err, os.ErrDeadlineExceeded) {
			open[r.Name]++
		}
		if r.Bytes > 0 { // it answers no stranger
			answered++
		}
	}
	if len(open) > 0 {
		t.Errorf("connections still open %v after their dial, by kind: %v", bound, open)
	}
	if answered > 0 {
		t.Errorf("the listener answered %d strangers", answered)
	}
	fmt.Printf("%s %d silent and %d garbage connections closed\n", testutil.FloodReport, n, len(results)-n)
}
