//go:build linux

package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goccl/goccl/internal/testutil"
)

// The flood test's attacker runs in a child process, this test binary
// again (testutil.StartFlood); the environment tells it what to attack.
const (
	envFloodAddr  = "GOCCL_TEST_STORE_FLOOD_ADDR"  // in the child: the server to attack
	envFloodN     = "GOCCL_TEST_STORE_FLOOD_N"     // silent connections to open
	envFloodBound = "GOCCL_TEST_STORE_FLOOD_BOUND" // each must be closed within this of its dial
)

// TestUnauthenticatedFlood: 2000 connections that never send a byte, and
// some that send garbage, against a store server with a secret while a
// 4-rank job uses it. The job completes (its clients get in once the
// pending slots free, and its waits outlast the handshake timeout); every
// attacking connection is closed within the handshake timeout plus 5 s
// of its dial; the server process never holds more descriptors than
// MaxPending plus its own; and the log holds a summary, not a line per
// connection.
func TestUnauthenticatedFlood(t *testing.T) {
	if addr := os.Getenv(envFloodAddr); addr != "" {
		floodChild(t, addr)
		return
	}
	const (
		deadline   = 300 * time.Millisecond
		maxPending = 64
		silent     = 2000
		ranks      = 4
		rounds     = 20
	)
	testutil.RaiseFileLimit(t, 256)
	secret := []byte("flood")
	var logs testutil.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	base := testutil.OpenFDs(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{Secret: secret, HandshakeTimeout: deadline, MaxPending: maxPending,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ctx, ln) }()
	defer func() { srv.Close(); <-served }()
	addr := ln.Addr().String()

	// Count the descriptors until the attack and the job are over.
	stopSampling := testutil.SampleFDs()

	child := testutil.StartFlood(t, "^TestUnauthenticatedFlood$", envFloodAddr+"="+addr, envFloodN+"="+strconv.Itoa(silent),
		envFloodBound+"="+(deadline+5*time.Second).String())

	// The job: every rank dials (retrying while the pending slots are
	// full), then rounds of Set and Wait; rank 0 first waits for a key
	// that rank 1 sets only after twice the handshake timeout, so an
	// authenticated connection must outlive it.
	var wg sync.WaitGroup
	errs := make(chan error, ranks)
	for r := range ranks {
		wg.Go(func() {
			c, err := Dial(ctx, addr, Options{Secret: secret})
			if err != nil {
				errs <- fmt.Errorf("rank %d: %w", r, err)
				return
			}
			defer c.Close()
			switch r {
			case 0:
				if _, err := c.Get(ctx, "late"); err != nil {
					errs <- fmt.Errorf("rank 0: waiting past the handshake timeout: %w", err)
					return
				}
			case 1:
				time.Sleep(2 * deadline)
				if err := c.Set(ctx, "late", []byte("x")); err != nil {
					errs <- fmt.Errorf("rank 1: %w", err)
					return
				}
			}
			for i := range rounds {
				if err := c.Set(ctx, fmt.Sprintf("round%d/%d", i, r), []byte{byte(r)}); err != nil {
					errs <- fmt.Errorf("rank %d round %d: %w", r, i, err)
					return
				}
				keys := make([]string, ranks)
				for p := range keys {
					keys[p] = fmt.Sprintf("round%d/%d", i, p)
				}
				if err := c.Wait(ctx, keys...); err != nil {
					errs <- fmt.Errorf("rank %d round %d: %w", r, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	report := child.Wait(t)
	most := stopSampling()

	// Allowed: the descriptors before the server existed, MaxPending
	// connections waiting to authenticate, the job's 2 per rank (client
	// and server side), and slack for the listener, the pipes to the
	// child, the runtime's poller, the sampler's own directory handle and
	// a connection accepted beyond the cap in the instant before it is
	// closed.
	limit := base + maxPending + 2*ranks + 16
	t.Logf("descriptors: %d before, at most %d during the attack (limit %d); %s", base, most, limit, report)
	if most > limit {
		t.Errorf("the server process held %d descriptors, more than %d before + %d pending + its own", most, base, maxPending)
	}
	srv.Close()
	warns := strings.Count(logs.String(), "level=WARN")
	if warns > 3 {
		t.Errorf("%d warn lines for one flood; want a summary at most every 10 s:\n%s", warns, logs.String())
	}
	if !strings.Contains(logs.String(), "refused") {
		t.Errorf("no refusal logged:\n%s", logs.String())
	}
}

// floodChild is the attacker: it opens the garbage connections, then the
// silent ones, says so, and checks that the server closes each within
// the bound.
func floodChild(t *testing.T, addr string) {
	n, bound := testutil.FloodArgs(t, envFloodN, envFloodBound)
	garbage := map[string][]byte{
		"http":          []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"random":        bytes.Repeat([]byte{0x5a, 0xc3, 0x11, 0x99}, 16),
		"huge length":   {0xff, 0xff, 0xff, 0x7f, 1},
		"over pre-auth": appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("k"), make([]byte, 2*MaxPreAuthMessage)}}),
		"set":           appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("k"), []byte("v")}}),
		"wrong mac":     appendMsg(nil, &msg{op: opAuth, id: 1, args: [][]byte{make([]byte, nonceLen), make([]byte, 32)}}),
		"half header":   {9, 0},
		"half frame":    appendMsg(nil, &msg{op: opSet, id: 1, args: [][]byte{[]byte("key"), []byte("value")}})[:12],
	}
	results := testutil.Attack(t, addr, garbage, n, bound)
	served, atOnce := 0, 0
	open := map[string]int{}
	for _, r := range results {
		if errors.Is(r.Err, os.ErrDeadlineExceeded) {
			open[r.Name]++
			continue
		}
		if r.Name == "silent" {
			if r.Bytes > 0 { // served (under the cap) before it was closed
				served++
			} else {
				atOnce++
			}
		}
	}
	if len(open) > 0 {
		t.Errorf("connections still open %v after their dial, by kind: %v", bound, open)
	}
	fmt.Printf("%s silent connections served then closed: %d, closed at once: %d\n", testutil.FloodReport, served, atOnce)
}
